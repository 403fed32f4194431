#!/usr/bin/env bash
# coordinator.recovery=continue under repeated failures: 3 trainers on 6 partitions, 5 kill -9 of
# random trainers, each restarted 500 ms later (the new process registers under the id of one
# still live: "replaced"), partitions moving at every join and removal, checkpoints every second.
# Nothing rolls back after the startup recovery, and the run still drains to a LATEST that counts
# exactly the examples produced: a partition taken over resumes from the newest LATEST (the
# trainer asks the coordinator for it), and a report naming a partition moved away before its
# epoch completed is dropped and sent again without it.
# usage: launch_continue.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out.txt" "$DIR/run/coordinator.log" "$DIR/run/trainer-*.log")
FAIL_TAIL=15
N=24000

timeout 400 "$SPARROW" launch --examples $N --rate 3000 --mode async --trainers 3 \
    --partitions 6 --shards 2 --checkpoint-interval 1s --no-serve --duration 330 \
    --set trainer:kafka.session.timeout.ms=6000 --set trainer:kafka.heartbeat.interval.ms=500 \
    --set coordinator:coordinator.recovery=continue \
    --kill trainer --kills 5 --kill-interval 1000:2000 --restart-after 500 --chaos-seed 5 \
    --run-dir "$DIR/run" >"$DIR/out.txt" 2>&1 || fail "launch exit status"
tail -3 "$DIR/out.txt"
summary_check "$DIR/run" <<PY
want(s["ok"] and s["drained"], "not ok/drained")
want(s["checkpoint"]["manifest_example_count"] == $N, "manifest example_count != $N")
want(s["chaos"] == {"kills": 5, "restarts": 5}, "chaos counts")
PY
n=$(grep -c "recovery started" "$DIR/run/coordinator.log" || true)
[ "$n" = 1 ] || fail "$n recoveries: only the startup one expected under continue"
grep -q "without rollback" "$DIR/run/coordinator.log" || fail "no trainer replaced or removed"
echo "launch_continue: ok"
