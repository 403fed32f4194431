#!/usr/bin/env bash
# Fuzzes every libFuzzer target in a fuzz build for a few seconds each, seeded from its corpus,
# JOBS targets at a time (each fuzzer is one process on one core, so JOBS = cores gives every
# target the same fuzzing time as one at a time, in 1/JOBS of the wall time).
# usage: scripts/run-fuzzers.sh BUILD_DIR SECONDS [JOBS]
set -euo pipefail
build=$1
seconds=${2:-30}
jobs=${3:-1}
root=$(cd "$(dirname "$0")/.." && pwd)

# fuzz_one NAME BIN: one target's run; its exit status is the fuzzer's.
fuzz_one() {
    local name=$1 bin=$2 work rc=0
    work=$(mktemp -d)
    cp -r "$root/tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    mkdir -p "$build/fuzz-artifacts/$name"
    "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$build/fuzz-artifacts/$name/" "$work" 2>"$build/fuzz-artifacts/$name.log" ||
        rc=$?
    rm -rf "$work"
    return "$rc"
}

# report NAME RC: the target's last status line, or its log's tail when it failed.
report() {
    local name=$1 rc=$2 log="$build/fuzz-artifacts/$1.log"
    if [ "$rc" -ne 0 ]; then
        tail -40 "$log"
        echo "fuzz: $name FAILED (exit $rc)"
        return 1
    fi
    echo "fuzz: $name ran ${seconds}s: $(grep -E '^(#[0-9]+ *DONE|Done)' "$log" | tail -1 || true)"
}

declare -A running=() # pid -> target name
found=0
failed=0
# reap: waits for one running fuzzer and reports it.
reap() {
    local pid rc=0
    wait -n -p pid "${!running[@]}" || rc=$?
    report "${running[$pid]}" "$rc" || failed=$((failed + 1))
    unset "running[$pid]"
}
for bin in "$build"/tests/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    case "$bin" in *_replay) continue ;; esac
    found=$((found + 1))
    [ "${#running[@]}" -lt "$jobs" ] || reap
    fuzz_one "$(basename "$bin")" "$bin" &
    running[$!]=$(basename "$bin")
done
while [ "${#running[@]}" -gt 0 ]; do reap; done
[ "$found" -gt 0 ] || { echo "fuzz: no targets built in $build"; exit 1; }
[ "$failed" -eq 0 ] || { echo "fuzz: $failed of $found targets FAILED"; exit 1; }
echo "fuzz: $found targets ran without a crash, $jobs at a time"
