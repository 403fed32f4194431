# json_parse_bench: the JSON-lines parser (fast path + json-c fallback) against json-c alone, on
# 39-feature events from `sparrow gen --format json`, in one run.
add_executable(json_parse_bench ${CMAKE_CURRENT_SOURCE_DIR}/json_parse_bench.c)
target_link_libraries(json_parse_bench PRIVATE sparrow_ingest)
target_include_directories(json_parse_bench PRIVATE ${PROJECT_SOURCE_DIR}/ingest/src)
add_custom_target(json_parse_bench_run
    COMMAND sparrow gen --n 100000 --format json --out ${CMAKE_CURRENT_BINARY_DIR}/json_events.json
            --log-level warn
    COMMAND json_parse_bench ${CMAKE_CURRENT_BINARY_DIR}/json_events.json
    DEPENDS sparrow json_parse_bench
    USES_TERMINAL
    COMMENT "json_parse_bench: JSON parser events/s, fast path vs json-c")
