# trainer unit tests. White-box ones include trainer/src's private header; test_trn_ref generates
# its data with the tools library (sparrow gen's generator).
foreach(_trn_unit trn_batch trn_model trn_topk trn_pv trn_ref trn_config trn_loop)
    spw_unit(${_trn_unit} sparrow_trainer sparrow_tools)
    if(TARGET test_${_trn_unit})
        target_include_directories(test_${_trn_unit} PRIVATE ${PROJECT_SOURCE_DIR}/trainer/src)
        set_tests_properties(test_${_trn_unit} PROPERTIES LABELS "unit;trainer")
    endif()
endforeach()
# The worker loop with Kafka input (librdkafka's mock cluster in process). Labelled "kafka" so that
# ThreadSanitizer runs can skip it.
if(TARGET sparrow_kafka AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/test_trn_loop_kafka.c)
    spw_add_unit_test(test_trn_loop_kafka SOURCES test_trn_loop_kafka.c
                      LIBS sparrow_trainer sparrow_tools sparrow_kafka LABELS "trainer;kafka"
                      TIMEOUT 180)
endif()
# The worker loop over the ZeroMQ transport, shards served from threads of the test.
spw_unit(trn_loop_zmq sparrow_trainer sparrow_tools)
if(TARGET test_trn_loop_zmq)
    target_link_libraries(test_trn_loop_zmq PRIVATE Threads::Threads)
    set_tests_properties(test_trn_loop_zmq PROPERTIES LABELS "unit;trainer")
endif()
