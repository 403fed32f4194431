#!/usr/bin/env bash
# `sparrow launch` fault injection: in sync mode trainer-1 is killed -9 and not restarted; the
# coordinator removes the dead member, trainer-0 takes its partitions (after the Kafka group's
# session timeout) and the run still drains to exactly the examples produced.
# usage: launch_kill.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out.txt" "$DIR/run/coordinator.log" "$DIR/run/trainer-*.log")
FAIL_TAIL=15

# 20000 examples at 2000/s: 10 s of stream, well inside the Kafka mock's retention window
timeout 400 "$SPARROW" launch --examples 20000 --rate 2000 --mode sync \
    --kill-at 4:trainer-1:norestart --duration 330 --run-dir "$DIR/run" >"$DIR/out.txt" 2>&1 ||
    fail "launch exit status"
cat "$DIR/out.txt"
grep -q "^chaos: t=.*kill -9 trainer-1 (pid [0-9]*), not restarted" "$DIR/out.txt" ||
    fail "the kill is not on stdout"
grep -q "kill -9 trainer-1" "$DIR/run/chaos.log" || fail "the kill is not in chaos.log"
summary_check "$DIR/run" <<'PY'
want(s["ok"] and s["drained"], "not ok/drained")
want(s["mode"] == "sync", "mode")
want(s["examples_produced"] == 20000, "examples_produced != 20000")
want(s["checkpoint"]["manifest_example_count"] == 20000, "manifest example_count != 20000")
want(s["chaos"] == {"kills": 1, "restarts": 0}, "chaos counts")
procs = {p["name"]: p["exit"] for p in s["processes"]}
want(procs["trainer-1"] == "signal 9", "trainer-1 exit")
want(procs["trainer-0"] == "exit 0", "trainer-0 exit")
PY
echo "launch_kill: ok"
