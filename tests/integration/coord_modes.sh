#!/usr/bin/env bash
# The coordinator wired into real processes: `sparrow kafka-mock`, `sparrow gen` producing to
# Kafka, two `sparrow pserver` shards and two Kafka trainers with trainer.coordinator set, one of
# them slowed (trainer.debug.delay_ms). sync: the trainers' clocks never differ by more than one
# (every step waits); ssp:2: never by more than 3 (S + the step in flight); async: the fast one
# runs ahead. sync also runs checkpoint epochs (every 40 steps): MANIFEST + LATEST with offsets and
# every shard's checkpoint directory; then the slowed trainer is killed -9 and the other goes on
# once the coordinator removed it (member timeout).
# The gaps are of the coordinator clocks (sparrow_trainer_clock: steps, and ticks while a trainer
# has no records) in sync and ssp, of the steps in async.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

start_broker examples:4
timeout 60 "$SPARROW" gen --n 300000 --seed 3 --rate 1000000 --out "kafka://$BS/examples" \
    2>"$DIR/gen.log" || fail "gen to Kafka"
grep -q "records=1172 " "$DIR/gen.log" || fail "gen: expected 1172 ExampleBatch records"

# step TRAINER_HTTP_PORT [METRIC]: the trainer's sparrow_trainer_step gauge, or METRIC (-1 when
# unreachable)
step() {
    python3 - "$1" "${2:-sparrow_trainer_step}" <<'PY'
import sys, urllib.request
try:
    page = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=2).read().decode()
except Exception:
    print(-1); sys.exit(0)
v = [l.split()[-1] for l in page.splitlines() if l.split(" ")[0] == sys.argv[2]]
print(int(float(v[0])) if v else -1)
PY
}

# run MODE: fresh shards, coordinator and trainers; samples both trainers' steps 15 times (the
# two reads of a sample a few ms apart); sets GAP_MAX to the largest |fast - slow| seen and
# leaves everything running.
run() {
    local mode=$1
    CK="$DIR/ck-${mode/:/_}"
    mkdir -p "$CK"
    start_shards 2 5 --set pserver.checkpoint.dir="$CK"
    COORD_LOG="$DIR/coord-${mode/:/_}.log" start_coordinator "$mode" "$CK" \
        --set coordinator.member.timeout=5s --set coordinator.startup.grace=1s \
        --set coordinator.checkpoint.steps=40
    H_FAST=$(free_port)
    H_SLOW=$(free_port)
    local t
    for t in fast slow; do
        local h=$H_FAST extra=()
        if [ $t = slow ]; then h=$H_SLOW; extra=(--set trainer.debug.delay_ms=40); fi
        "$SPARROW" trainer --in "kafka://$BS/examples" \
            --shards "$SHARDS" --model fm --latent-dim 4 \
            --batch 256 --backend cpu --group "g-${mode/:/_}" --id "$([ $t = fast ] && echo 1 || echo 2)" \
            --http-port "$h" --set trainer.coordinator="tcp://127.0.0.1:$COORD_PORT" \
            --set trainer.shutdown.grace=3s --set kafka.session.timeout.ms=6000 --set kafka.heartbeat.interval.ms=500 \
            "${extra[@]}" >"$DIR/trainer-$t-${mode/:/_}.log" 2>&1 &
        PIDS+=("$!")
        if [ $t = fast ]; then FAST_PID=$!; else SLOW_PID=$!; fi
    done
    wait_for "both trainers stepping ($mode)" 60 bash -c \
        "[ \$($(declare -f step); step $H_FAST) -gt 5 ] && [ \$($(declare -f step); step $H_SLOW) -gt 5 ]"
    read -r GAP_MAX f s < <(python3 - "$H_FAST" "$H_SLOW" "$GAP_METRIC" <<'PY'
import sys, time, urllib.request
def step(port):
    page = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=2).read().decode()
    return int(float([l.split()[-1] for l in page.splitlines()
                      if l.split(" ")[0] == sys.argv[3]][0]))
gap = 0
for _ in range(15):
    f, s = step(sys.argv[1]), step(sys.argv[2])
    gap = max(gap, abs(f - s))
    time.sleep(0.2)
print(gap, f, s)
PY
)
    echo "$mode: $GAP_METRIC fast $f, slow $s, largest gap $GAP_MAX"
}

# Trainers first (they drain their pushes to live shards), then coordinator and shards.
stop_all() {
    local p
    for p in "$FAST_PID" "$SLOW_PID"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "$FAST_PID" "$SLOW_PID"; do wait "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]:1}"; do wait "$p" 2>/dev/null || true; done
    PIDS=("${PIDS[0]}")
}

# sync and ssp bound the coordinator clocks (steps, and ticks while a trainer has no records);
# async lets the fast trainer's steps run ahead
GAP_METRIC=sparrow_trainer_clock
run sync
check "$GAP_MAX <= 1" "sync: the fast trainer ran ahead"
# checkpoint epochs of the sync run
wait_for "a checkpoint" 30 test -s "$CK/checkpoints/LATEST"
E=$(cat "$CK/checkpoints/LATEST")
[ -s "$CK/checkpoints/$E/MANIFEST" ] || fail "no MANIFEST for LATEST epoch $E"
[ -s "$CK/checkpoints/$E/shard-0/CHECKSUM" ] || fail "no shard-0 checkpoint at epoch $E"
[ -s "$CK/checkpoints/$E/shard-1/CHECKSUM" ] || fail "no shard-1 checkpoint at epoch $E"
grep -q "checkpoint completed epoch=$E .*partitions=4 shards=2" "$DIR/coord-sync.log" ||
    fail "coordinator: epoch $E did not complete with 4 partitions and 2 shards"
echo "sync: checkpoint epoch $E: MANIFEST, LATEST and both shards' checkpoints"
# kill -9 the slowed trainer: the coordinator removes it and the other one's clock goes on (steps
# while records last, idle ticks after)
kill -9 "$SLOW_PID"
before=$(step "$H_FAST" sparrow_trainer_clock)
wait_for "the fast trainer alone" 30 bash -c \
    "[ \$($(declare -f step); step $H_FAST sparrow_trainer_clock) -gt $((before + 30)) ]"
grep -q "removed\|silent" "$DIR/coord-sync.log" || fail "coordinator did not remove the killed trainer"
echo "sync: killed trainer removed, the other's clock went from $before to $(step "$H_FAST" sparrow_trainer_clock)"
SLOW_PID=
stop_all

run ssp:2
check "$GAP_MAX <= 3" "ssp:2: the gap exceeded S + 1"
stop_all

GAP_METRIC=sparrow_trainer_step
run async
check "$GAP_MAX > 8" "async: the fast trainer did not run ahead"
stop_all
echo "coord_modes: ok"
