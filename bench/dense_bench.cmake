# dense_bench: the dense towers' training step on cuBLAS against OpenBLAS in the same run (CPU
# figures only without a device). scripts/gpu-check.sh runs it on a machine with a GPU.
add_executable(dense_bench ${CMAKE_CURRENT_SOURCE_DIR}/dense_bench.c)
target_link_libraries(dense_bench PRIVATE sparrow_dense)
add_custom_target(dense_bench_run
    COMMAND dense_bench
    DEPENDS dense_bench
    USES_TERMINAL
    COMMENT "dense_bench: CUDA vs CPU dense step time")
