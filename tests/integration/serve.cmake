# `sparrow serve` against `sparrow kafka-mock`: serve_driver produces model updates and writes a
# shard checkpoint; the scripts start replicas and compare their answers with a direct
# computation. Each script gets: sparrow binary, scratch dir, driver. Labelled "kafka" (TSan
# runs skip librdkafka).
if(TARGET sparrow_serve)
    add_executable(serve_driver ${CMAKE_CURRENT_SOURCE_DIR}/serve_driver.c)
    target_link_libraries(serve_driver PRIVATE sparrow_pserver sparrow_coordinator sparrow_kafka
                          sparrow_proto)
    foreach(_serve_it serve_updates serve_restore serve_ready)
        if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_serve_it}.sh)
            add_test(NAME ${_serve_it}
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_serve_it}.sh $<TARGET_FILE:sparrow>
                             ${CMAKE_CURRENT_BINARY_DIR}/${_serve_it}.d
                             $<TARGET_FILE:serve_driver>)
            set_tests_properties(${_serve_it} PROPERTIES TIMEOUT 400 LABELS "integration;kafka")
        endif()
    endforeach()
endif()
# serve_publish: a real shard publishing to the stream (driven by pserver.cmake's pserver_client).
if(TARGET sparrow_serve AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/serve_publish.sh)
    add_test(NAME serve_publish
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_publish.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/serve_publish.d $<TARGET_FILE:pserver_client>)
    set_tests_properties(serve_publish PROPERTIES TIMEOUT 240 LABELS "integration;kafka")
endif()
