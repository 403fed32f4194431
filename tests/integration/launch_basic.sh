#!/usr/bin/env bash
# `sparrow launch` end to end: bad arguments exit 2 with a message; a finite async run (20000
# examples produced in a burst) drains: the generator's count, the LATEST manifest's example_count
# and summary.json agree, samples.csv has a line per trainer per sample, the stop is clean.
# usage: launch_basic.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out*.txt" "$DIR/run/*.log")
FAIL_TAIL=15

# bad arguments: exit 2 and say what is wrong, before anything starts
bad() {
    local want=$1
    shift
    local rc=0
    "$SPARROW" launch --run-dir "$DIR/bad" "$@" >"$DIR/bad.txt" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "launch $* exited $rc, want 2"
    grep -q -- "$want" "$DIR/bad.txt" || fail "launch $*: no message about '$want': $(cat "$DIR/bad.txt")"
}
bad "--shards wants an integer in \[1, 16\], got '17'" --shards 17
bad "--shards" --shards 0
bad "--trainers wants an integer in \[1, 64\], got '65'" --trainers 65
bad "--trainers" --trainers 0
bad "--partitions" --partitions 65
bad "--slow" --slow 64:2
bad "trainer 20 of 16" --trainers 16 --slow 20:2
bad "--mode" --mode ssp
bad "--penalty" --penalty exp:2
bad "--slow" --slow 1:0.5
bad "trainer 3" --slow 3:2
bad "--set" --set nobody:a=b
bad "go together" --kill trainer
bad "--kill" --kill shard --kills 2
bad "no process called 'trainer-2'" --kill-at 3:trainer-2
bad "--kill-at" --kill-at 3:trainer-1:later
bad "--checkpoint-interval" --checkpoint-interval 10x
bad "unknown" --frobnicate 1
[ ! -e "$DIR/bad/kafka-mock.log" ] || fail "bad arguments started processes"
"$SPARROW" launch --help | grep -c -- '--kill-at' >/dev/null || fail "--help does not document --kill-at"

timeout 200 "$SPARROW" launch --examples 20000 --rate 20000 --mode async --duration 120 \
    --run-dir "$DIR/run" >"$DIR/out.txt" 2>&1 || fail "launch exit status"
cat "$DIR/out.txt"
grep -q "^launch summary: ok" "$DIR/out.txt" || fail "no ok summary line"
summary_check "$DIR/run" <<'PY'
want(s["ok"] and s["drained"], "not ok/drained")
want(s["mode"] == "async" and s["trainers"] == 2 and s["shards"] == 2, "mode/trainers/shards")
want(s["examples_produced"] == 20000, "examples_produced != 20000")
want(s["checkpoint"]["manifest_example_count"] == 20000, "manifest example_count != 20000")
want(s["examples_trained"] >= 20000, "examples_trained < 20000")
want(len(s["per_trainer"]) == 2, "per_trainer")
want(all(0 < t["window_logloss"] < 1 for t in s["per_trainer"]), "window logloss")
want(s["staleness"]["count"] > 0, "no staleness histogram")
want(s["chaos"] == {"kills": 0, "restarts": 0}, "chaos")
want(all(p["exit"] == "exit 0" for p in s["processes"]), "exit statuses")
lines = open(d + "/samples.csv").read().split("\n")
want(lines[0] == "t_ms,trainer,step,clock,examples,window_logloss", "samples.csv header")
rows = [l.split(",") for l in lines[1:] if l]
want(len(rows) >= 4 and all(len(r) == 6 for r in rows), "samples.csv rows")
want({r[1] for r in rows} == {"0", "1"}, "samples.csv trainers")
want(max(float(r[4]) for r in rows) > 0, "samples.csv never saw an example")
want(any(0 < float(r[5]) < 1 for r in rows), "samples.csv never saw a window logloss")
PY
echo "launch_basic: ok"
