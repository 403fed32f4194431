# backend_bench: the trainer's compute step on the CUDA backend against the CPU backend in the same
# run (skips CUDA without a device). scripts/gpu-check.sh runs it on a machine with a GPU.
add_executable(backend_bench ${CMAKE_CURRENT_SOURCE_DIR}/backend_bench.c)
target_link_libraries(backend_bench PRIVATE sparrow_trainer sparrow_tools)
add_custom_target(backend_bench_run
    COMMAND backend_bench
    DEPENDS backend_bench
    USES_TERMINAL
    COMMENT "backend_bench: CUDA vs CPU backend step time")
