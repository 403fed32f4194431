#!/usr/bin/env bash
# gen_bench: the rate of `sparrow gen` in each format with 39 fields, to a file and to /dev/null,
# against a baseline measured in the same run: writing as many bytes of zeros with `head -c` to the
# same directory (the cost of the bytes alone). Target: >= 500,000 examples/s for pb on one core
# (the generator's thread; a second thread does the writes).
# Usage: bench/gen_bench.sh <build dir> [examples]   (also: cmake --build <dir> --target gen_bench)
set -euo pipefail
BUILD=${1:?usage: gen_bench.sh <build dir> [examples]}
N=${2:-2000000}
SPARROW=$BUILD/sparrow
[ -x "$SPARROW" ] || { echo "gen_bench: $SPARROW not built" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gen_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

now() { date +%s.%N; }
# seconds between two `now` values
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
per_s() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }'; }

# run_gen FORMAT OUT: runs the generator, sets secs (wall clock, process start to exit, including
# the bias calibration), gen_secs (the generator's own loop, from its summary) and bytes
run_gen() {
    local t0 t1
    t0=$(now)
    "$SPARROW" gen --n "$N" --seed 1 --fields 39 --format "$1" --out "$2" 2>"$TMP/log"
    t1=$(now)
    secs=$(elapsed "$t0" "$t1")
    gen_secs=$(grep -o ' seconds=[0-9.]*' "$TMP/log" | cut -d= -f2)
    bytes=$(grep -o ' bytes=[0-9]*' "$TMP/log" | cut -d= -f2)
}

echo "gen_bench: $N examples per run, 39 fields, $(nproc) cores, output in $TMP"
pb_rate=0
pb_file_rate=0
for fmt in pb json criteo; do
    run_gen "$fmt" /dev/null
    null_rate=$(per_s "$N" "$secs")
    run_gen "$fmt" "$TMP/out.$fmt"
    rate=$(per_s "$N" "$secs")
    [ "$fmt" = pb ] && pb_rate=$null_rate && pb_file_rate=$rate
    rm -f "$TMP/out.$fmt"
    # baseline: the same number of bytes, written by head -c from /dev/zero
    t0=$(now)
    head -c "$bytes" /dev/zero >"$TMP/zeros"
    t1=$(now)
    base_secs=$(elapsed "$t0" "$t1")
    rm -f "$TMP/zeros"
    mb_s=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", (s > 0 ? b / s / 1e6 : 0) }')
    base_mb_s=$(awk -v b="$bytes" -v s="$base_secs" 'BEGIN { printf "%.1f", (s > 0 ? b / s / 1e6 : 0) }')
    echo "gen_bench format=$fmt examples=$N seconds=$secs examples_per_s=$rate" \
        "loop_seconds=$gen_secs devnull_examples_per_s=$null_rate" \
        "bytes_per_example=$(awk -v b="$bytes" -v n="$N" 'BEGIN { printf "%.1f", b / n }')" \
        "mb_per_s=$mb_s baseline=head_c_zeros baseline_seconds=$base_secs" \
        "baseline_mb_per_s=$base_mb_s ratio=$(ratio "$base_secs" "$secs")"
done
# The target is the generator's own rate on one core (to /dev/null); to a file the writer thread
# adds the kernel's page-cache copy on a second core, reported beside it.
verdict=FAIL
[ "$pb_rate" -ge 500000 ] && verdict=PASS
echo "gen_bench target pb_devnull_examples_per_s>=500000 got=$pb_rate" \
    "pb_file_examples_per_s=$pb_file_rate $verdict"
