# tools unit tests: `sparrow eval`'s library (checkpoint and in-process shard sources, scoring).
if(TARGET sparrow_tools)
    spw_unit(evaluate sparrow_tools)
endif()
