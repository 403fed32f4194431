# coordinator unit tests: modes and epochs with fake members and fake shards (threads), files.
foreach(_coord_unit coord_modes coord_files coord_epochs coord_step_rule)
    spw_unit(${_coord_unit} sparrow_coordinator)
endforeach()
# the epoch's offset merge (white-box: coordinator/src's private header)
spw_unit(coord_offsets sparrow_coordinator)
target_include_directories(test_coord_offsets PRIVATE ${PROJECT_SOURCE_DIR}/coordinator/src)
# The local launcher of `sparrow demo`, tests and benchmarks (tools/src/launch.c), listed here
# with the pipeline it runs.
spw_unit(launch sparrow_tools)
# The trainer-side recovery calls (top-k drop, PS client abandon, Kafka seek).
if(TARGET sparrow_kafka)
    spw_unit(coord_restore sparrow_trainer sparrow_tools sparrow_kafka)
endif()
