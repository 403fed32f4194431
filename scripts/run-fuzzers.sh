#!/usr/bin/env bash
# Fuzzes every libFuzzer target in a fuzz build for a few seconds each, seeded from its corpus.
# usage: scripts/run-fuzzers.sh BUILD_DIR SECONDS
set -euo pipefail
build=$1
seconds=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
found=0
for bin in "$build"/tests/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    case "$bin" in *_replay) continue ;; esac
    name=$(basename "$bin")
    found=$((found + 1))
    work=$(mktemp -d)
    cp -r "$root/tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    mkdir -p "$build/fuzz-artifacts/$name"
    echo "fuzz: $name for ${seconds}s"
    "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$build/fuzz-artifacts/$name/" "$work" 2>"$build/fuzz-artifacts/$name.log" ||
        { tail -40 "$build/fuzz-artifacts/$name.log"; echo "fuzz: $name FAILED"; exit 1; }
    grep -E '^(#[0-9]+ *DONE|Done)' "$build/fuzz-artifacts/$name.log" | tail -1 || true
    rm -rf "$work"
done
[ "$found" -gt 0 ] || { echo "fuzz: no targets built in $build"; exit 1; }
echo "fuzz: $found targets ran without a crash"
