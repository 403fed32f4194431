# trainer_bench: the reference trainer as a program (baseline (a)) and the script that times it
# against `sparrow trainer` with an in-process shard and with `sparrow pserver` in the same run.
add_executable(trainer_bench_ref ${CMAKE_CURRENT_SOURCE_DIR}/trainer_bench_ref.c)
target_link_libraries(trainer_bench_ref PRIVATE sparrow_trainer)
add_custom_target(trainer_bench
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/trainer_bench.sh ${CMAKE_BINARY_DIR}
    DEPENDS sparrow trainer_bench_ref
    USES_TERMINAL
    COMMENT "trainer_bench: reference loop vs sparrow trainer (in-process shard, pserver, top-k)")
