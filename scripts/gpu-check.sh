#!/usr/bin/env bash
# gpu-check: the CUDA backend's checks on a machine with an NVIDIA GPU that has none of Sparrow's
# build dependencies (a bare CUDA image): build and bundle here, run there.
#
#   scripts/gpu-check.sh bundle BUILD_DIR BUNDLE_DIR
#       copies the GPU tests, bench/backend_bench, bench/dense_bench and sparrow from BUILD_DIR
#       (configured with -DSPARROW_CUDA=on) into BUNDLE_DIR/bin, and every shared library they
#       load except glibc's and cuBLAS's (over 500 MB; the GPU machine's CUDA provides it, from
#       /usr/local/cuda/lib64) into BUNDLE_DIR/lib.
#   scripts/gpu-check.sh run BUNDLE_DIR OUT_DIR
#       on the GPU machine: the device, the GPU tests (CUDA against the CPU oracle),
#       bench/backend_bench (the compute step, CUDA vs CPU), bench/dense_bench (the dense
#       towers' step, cuBLAS vs OpenBLAS, batch 4096 and 65536), `sparrow trainer` end to end on the
#       CPU and the CUDA backend (in-process shard, GPU_CHECK_EXAMPLES examples, default 1M; FM
#       k=64 and 16, and DeepFM k=16 with its network on cuBLAS on the first
#       GPU_CHECK_DEEP_EXAMPLES, default 300k), the CPU backend's compute threads
#       (GPU_CHECK_THREADS, default 1 2 4 8 16; FM k=16, 300k examples), then
#       compute-sanitizer (memcheck, racecheck) where it works. Logs go to OUT_DIR; a summary is
#       printed last. Exit status 1 when a test or a check failed. About 7 minutes on an H200.
set -uo pipefail

bundle() {
    local build=${1:?build dir} dir=${2:?bundle dir}
    local bins=(sparrow tests/gpu/test_cuda_gather tests/gpu/test_cuda_model
        tests/gpu/test_cuda_emulated tests/gpu/test_cuda_dense bench/backend_bench
        bench/dense_bench)
    rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" || return 1
    for b in "${bins[@]}"; do
        [ -x "$build/$b" ] || { echo "gpu-check: $build/$b not built" >&2; return 1; }
        cp "$build/$b" "$dir/bin/" || return 1
        # every resolved library but the C library's own (the machine's glibc must be used)
        ldd "$build/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
            grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libcublas|libcublasLt)\.so' |
            while read -r lib; do cp -L -n "$lib" "$dir/lib/"; done
    done
    strip --strip-debug "$dir/bin/"* "$dir/lib/"* 2>/dev/null
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' with uncommitted changes')" \
        >"$dir/REVISION"
    du -sh "$dir"
}

run() {
    local dir=${1:?bundle dir} out=${2:?out dir}
    dir=$(cd "$dir" && pwd) || return 1
    mkdir -p "$out" || return 1
    export PATH=$PATH:/usr/local/cuda/bin
    # cuBLAS from the machine's CUDA (not bundled)
    export LD_LIBRARY_PATH=$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    local bin=$dir/bin failed=0
    declare -a summary
    note() { summary+=("$1"); echo "gpu-check: $1"; }
    # step NAME SECONDS CMD...: runs CMD with a limit, its output in OUT/NAME.log
    step() {
        local name=$1 limit=$2 rc=0
        shift 2
        local t0=$SECONDS
        timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
        note "$name: rc=$rc in $((SECONDS - t0)) s"
        [ "$rc" -eq 0 ] || failed=1
        return "$rc"
    }
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
        --format=csv >"$out/device.log" 2>&1
    note "device: $(tail -1 "$out/device.log")"
    for b in "$bin"/*; do
        if ldd "$b" | grep -q 'not found'; then
            note "$(basename "$b"): missing libraries: $(ldd "$b" | grep 'not found' | tr -s ' \n' ' ')"
            failed=1
        fi
    done
    for t in test_cuda_gather test_cuda_model test_cuda_emulated test_cuda_dense; do
        step "$t" 300 "$bin/$t"
        grep -E 'skipping|PASSED|FAILED|worst relative' "$out/$t.log" | sort | uniq -c | head -20
    done
    step backend_bench 300 "$bin/backend_bench" 30
    cat "$out/backend_bench.log"
    step dense_bench 300 "$bin/dense_bench" 5 4096,65536
    cat "$out/dense_bench.log"
    # end to end: sparrow trainer on one generated file, in-process shard, so that the backend
    # is what differs
    local n=${GPU_CHECK_EXAMPLES:-1000000} data=$out/data.pb
    if "$bin/sparrow" gen --n "$n" --seed 1 --fields 39 --out "$data" 2>"$out/gen.log"; then
        for model in "fm 64" "fm 16"; do
            read -r m k <<<"$model"
            for be in cpu cuda; do
                step "trainer-$m$k-$be" 300 "$bin/sparrow" trainer --in "file:$data" \
                    --shards inproc --backend "$be" --model "$m" --latent-dim "$k" --batch 8192 \
                    --http-port -1 --set trainer.lr=0.02 --set trainer.log.interval=0
                note "  $(grep ' finished ' "$out/trainer-$m$k-$be.log" | tail -1 |
                    grep -o -E '(examples|ex_per_s|window_logloss|backend)=[^ ]*' | tr '\n' ' ')"
            done
        done
        # the CPU backend's compute threads on this machine's cores (issue 20 section 3: 1 and 2
        # on the 2-core build machine, up to 16 here): FM k=16, the first 300k examples
        for t in ${GPU_CHECK_THREADS:-1 2 4 8 16}; do
            step "trainer-fm16-cpu-threads$t" 120 "$bin/sparrow" trainer --in "file:$data" \
                --shards inproc --backend cpu --model fm --latent-dim 16 --batch 8192 \
                --max-examples 300000 --http-port -1 --set trainer.threads="$t" \
                --set trainer.lr=0.02 --set trainer.log.interval=0
            note "  $(grep ' finished ' "$out/trainer-fm16-cpu-threads$t.log" | tail -1 |
                grep -o -E '(examples|ex_per_s|window_logloss|compute_s)=[^ ]*' | tr '\n' ' ')"
        done
        # a deep model: DeepFM's network on cuBLAS (network=cublas in the started line), the
        # embeddings' pooling and the FM part on the host; the first GPU_CHECK_DEEP_EXAMPLES
        local fields nd=${GPU_CHECK_DEEP_EXAMPLES:-300000}
        fields=$(printf 'I%d,' $(seq 1 13))$(printf 'C%d,' $(seq 1 26))
        for be in cpu cuda; do
            step "trainer-deepfm16-$be" 300 "$bin/sparrow" trainer --in "file:$data" \
                --shards inproc --backend "$be" --model deepfm --latent-dim 16 --batch 4096 \
                --fields "${fields%,}" --mlp 400,400 --max-examples "$nd" --http-port -1 \
                --set trainer.log.interval=0
            note "  $(grep -o -E 'network=[^ ]*' "$out/trainer-deepfm16-$be.log" | head -1) $(
                grep ' finished ' "$out/trainer-deepfm16-$be.log" | tail -1 |
                    grep -o -E '(examples|ex_per_s|window_logloss)=[^ ]*' | tr '\n' ' ')"
        done
        rm -f "$data"
    else
        note "gen failed: $(tail -1 "$out/gen.log")"
        failed=1
    fi
    # compute-sanitizer last (the slowest): memcheck on the tests' edge cases (empty, tiny,
    # shrinking batches), racecheck on every model and batch size of one backend_bench pass
    if command -v compute-sanitizer >/dev/null; then
        step sanitizer-memcheck-gather 60 compute-sanitizer --tool memcheck --error-exitcode 99 \
            "$bin/test_cuda_gather"
        step sanitizer-memcheck-model 150 compute-sanitizer --tool memcheck --error-exitcode 99 \
            "$bin/test_cuda_model"
        # (cub's sort and scan kernels, NVIDIA's own, are left out: under racecheck they take
        # minutes)
        step sanitizer-racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 99 \
            --kernel-name-exclude kns=cub "$bin/backend_bench" 1
        tail -n 2 "$out"/sanitizer-*.log
    else
        note "compute-sanitizer: not on this machine"
    fi
    # the summary, with the step table, is what docs/bench/gpu-check.txt keeps (bench/report.py
    # shows it in docs/BENCHMARKS.md when the benchmark machine has no GPU)
    {
        echo "scripts/gpu-check.sh run, $(date -u '+%Y-%m-%d %H:%M UTC'), bundle of git $(cat "$dir/REVISION")"
        printf '%s\n' "${summary[@]}"
        echo
        cat "$out/backend_bench.log"
        echo
        cat "$out/dense_bench.log"
    } >"$out/summary.txt"
    echo
    echo "== gpu-check summary"
    cat "$out/summary.txt"
    return "$failed"
}

case ${1:-} in
bundle) shift && bundle "$@" ;;
run) shift && run "$@" ;;
*)
    echo "usage: gpu-check.sh bundle BUILD_DIR BUNDLE_DIR | run BUNDLE_DIR OUT_DIR" >&2
    exit 2
    ;;
esac
