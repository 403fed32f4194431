# Trainer integration tests: `sparrow trainer` with `sparrow pserver` processes on loopback (kill -9
# and restart, SIGTERM), malformed input, and Kafka input through `sparrow kafka-mock`. Each script
# gets the sparrow binary and a scratch dir.
foreach(_trn_it trainer_pserver trainer_shard_restart trainer_sigterm trainer_malformed)
    spw_integration(${_trn_it} 120)
    if(TEST ${_trn_it})
        set_tests_properties(${_trn_it} PROPERTIES LABELS "integration;trainer")
    endif()
endforeach()
# Labelled "kafka" so that runs which cannot host librdkafka (ThreadSanitizer) can skip it.
if(TARGET sparrow_kafka)
    spw_integration(trainer_kafka 180)
    if(TEST trainer_kafka)
        set_tests_properties(trainer_kafka PROPERTIES LABELS "integration;trainer;kafka")
    endif()
endif()
