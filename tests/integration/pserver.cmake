# pserver integration tests: scripts that run `sparrow pserver` processes on loopback, driven by a
# small DEALER client (pserver_client.c). Each script gets: sparrow binary, scratch dir, client.
if(TARGET sparrow_pserver)
    add_executable(pserver_client ${CMAKE_CURRENT_SOURCE_DIR}/pserver_client.c)
    target_link_libraries(pserver_client PRIVATE sparrow_proto PkgConfig::ZMQ)
    foreach(_ps_it pserver_restart pserver_diskfull)
        if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_ps_it}.sh)
            add_test(NAME ${_ps_it}
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_ps_it}.sh $<TARGET_FILE:sparrow>
                             ${CMAKE_CURRENT_BINARY_DIR}/${_ps_it}.d $<TARGET_FILE:pserver_client>)
            # 77: the environment cannot run the test (no tmpfs mount for the disk-full case).
            set_tests_properties(${_ps_it} PROPERTIES TIMEOUT 120 LABELS integration
                                 SKIP_RETURN_CODE 77)
        endif()
    endforeach()
endif()
# `sparrow reshard` end to end: a checkpoint taken by shards, coordinator and a Kafka trainer,
# resharded 2 -> 3, 3 -> 2, 2 -> 1, each restored into fresh shards and checked row by row by
# reshard_check (the checkpoint reader, the PS client).
if(TARGET sparrow_trainer AND TARGET sparrow_coordinator AND TARGET sparrow_kafka)
    add_executable(reshard_check ${CMAKE_CURRENT_SOURCE_DIR}/reshard_check.c)
    target_link_libraries(reshard_check PRIVATE sparrow_trainer sparrow_coordinator sparrow_pserver)
    add_test(NAME reshard
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/reshard.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/reshard.d $<TARGET_FILE:reshard_check>)
    set_tests_properties(reshard PROPERTIES TIMEOUT 240 LABELS "integration;kafka")
endif()
