#!/usr/bin/env bash
# `sparrow demo` end to end, short: every component starts, examples are trained, the progress
# lines are plain lines without a TTY, the stop is clean and the summary names the run directory;
# then a second run whose trainer is killed -9 must fail loudly (non-zero, naming its log).
# usage: demo_smoke.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out*.txt")
FAIL_TAIL=30

timeout 90 "$SPARROW" demo --duration 12 --rate 2000 --run-dir "$DIR/run" >"$DIR/out.txt" 2>&1 ||
    fail "demo exit status"
cat "$DIR/out.txt"
grep -q "^demo summary: ok" "$DIR/out.txt" || fail "no clean summary"
grep -q "run directory: $DIR/run" "$DIR/out.txt" || fail "summary does not name the run directory"
! grep -q $'\r' "$DIR/out.txt" || fail "carriage returns without a TTY"
[ "$(grep -c '^t=' "$DIR/out.txt")" -ge 3 ] || fail "fewer than 3 progress lines"
ex=$(grep '^  ran' "$DIR/out.txt" | grep -o 'examples=[0-9]*' | cut -d= -f2)
[ "${ex:-0}" -gt 5000 ] || fail "trained only ${ex:-0} examples"
for f in kafka-mock gen coordinator shard-0 shard-1 trainer-0 trainer-1; do
    [ -s "$DIR/run/$f.log" ] || fail "no log $f.log"
done
grep -q 'trainer finished' "$DIR/run/trainer-0.log" || fail "trainer-0 did not finish cleanly"
# the end shows the product: the baselines beside the model, a prediction served, the freshness
grep -q '^t=.*logloss=[0-9.-]* (const [0-9.-]*, bayes [0-9.-]*)' "$DIR/out.txt" ||
    fail "the progress line lacks the constant predictor beside Bayes"
grep -q '^  learning: ' "$DIR/out.txt" || fail "no learning verdict"
grep -Eq '^  learning: (no full evaluation window yet|window logloss [0-9.]+, constant predictor [0-9.]+, Bayes [0-9.]+: [0-9.]+% (better|WORSE))' "$DIR/out.txt" ||
    fail "the learning verdict is malformed"
grep -q '^  prediction: curl -s -X POST http://127.0.0.1:[0-9]*/v1/predict' "$DIR/out.txt" ||
    fail "no prediction request printed"
grep -Eq '^ +-> HTTP 200 \{"predictions":\[0\.[0-9]+\]' "$DIR/out.txt" ||
    fail "serve did not answer the prediction with a probability"
# freshness over the run's second half, the p99 since serve started beside it
fresh='^  freshness (\(event time -> visible in serving\)(, last [0-9]+ s: p50 [0-9.]+ s, p99 [0-9.]+ s \([0-9]+ row updates\)|: no update in the run.s second half);'
fresh="$fresh p99 [0-9.]+ s since serve started|: serve applied no update)"
grep -Eq "$fresh" "$DIR/out.txt" || fail "no freshness line"

# a component that dies makes the demo fail loudly
"$SPARROW" demo --duration 60 --rate 2000 --run-dir "$DIR/run2" --no-serve >"$DIR/out2.txt" 2>&1 &
demo=$!
for _ in $(seq 1 300); do
    grep -q '^demo: running' "$DIR/out2.txt" && break
    sleep 0.1
done
victim=""
for p in $(pgrep -P "$demo"); do
    if tr '\0' ' ' <"/proc/$p/cmdline" | grep -q ' trainer .*--id 1 '; then victim=$p; fi
done
[ -n "$victim" ] || { kill "$demo"; fail "trainer-0 not found among the demo's children"; }
sleep 2
kill -9 "$victim"
rc=0
timeout 60 tail --pid="$demo" -f /dev/null || true
wait "$demo" || rc=$?
cat "$DIR/out2.txt" | tail -5
[ "$rc" -ne 0 ] || fail "demo exited 0 after a trainer died"
grep -q "FAILED: trainer-0 died (signal 9); read $DIR/run2/trainer-0.log" "$DIR/out2.txt" ||
    fail "the failure does not name the dead component and its log"
echo "demo_smoke: ok"
