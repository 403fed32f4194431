# Kafka unit tests (in-process mock cluster). Labelled "kafka" so TSan runs can skip them.
foreach(_spw_kafka_ut kafka_client)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/test_${_spw_kafka_ut}.c AND TARGET sparrow_kafka)
        spw_add_unit_test(test_${_spw_kafka_ut} SOURCES test_${_spw_kafka_ut}.c
                          LIBS sparrow_kafka LABELS kafka TIMEOUT 400)
    endif()
endforeach()
