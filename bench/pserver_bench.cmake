# pserver_bench (issue 3): rates of the shard as ratios against baselines of the same run.
if(TARGET sparrow_pserver)
    add_executable(pserver_bench ${CMAKE_CURRENT_SOURCE_DIR}/pserver_bench.c)
    target_include_directories(pserver_bench PRIVATE ${PROJECT_SOURCE_DIR}/pserver/src)
    target_link_libraries(pserver_bench PRIVATE sparrow_pserver)
    add_custom_target(pserver_bench_run
        COMMAND pserver_bench --sparrow $<TARGET_FILE:sparrow>
        DEPENDS pserver_bench sparrow
        USES_TERMINAL
        COMMENT "pserver_bench: row store, RocksDB, ZeroMQ and checkpoint rates")
endif()
