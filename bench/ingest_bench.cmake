# ingest_bench: a bare librdkafka consumer (the baseline) and the script that times it against
# `sparrow ingest` on the same data in the same run.
add_executable(ingest_bench_consume ${CMAKE_CURRENT_SOURCE_DIR}/ingest_bench_consume.c)
target_link_libraries(ingest_bench_consume PRIVATE PkgConfig::RDKAFKA)
add_custom_target(ingest_bench
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ingest_bench.sh ${CMAKE_BINARY_DIR}
    DEPENDS sparrow ingest_bench_consume
    USES_TERMINAL
    COMMENT "ingest_bench: bare librdkafka consume rate vs sparrow ingest end to end")
