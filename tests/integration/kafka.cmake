# Kafka integration tests: each starts `sparrow kafka-mock` as its own process. Labelled "kafka" so
# that sanitizer runs which cannot host librdkafka (ThreadSanitizer) can skip them (-LE kafka).
foreach(_spw_kafka_it kafka_mock ingest_dlq ingest_broker_down ingest_kill9 ingest_retention)
    spw_integration(${_spw_kafka_it} 180)
    if(TEST ${_spw_kafka_it})
        set_tests_properties(${_spw_kafka_it} PROPERTIES LABELS "integration;kafka")
    endif()
endforeach()
# File to file: no broker involved.
spw_integration(ingest_file 60)
