#!/usr/bin/env bash
# Exactly-once under crashes (the acceptance test of the coordinator issue): `sparrow launch` runs
# the Kafka mock, a generator producing N examples, the coordinator in hybrid mode, 2 shards and
# 3 trainers, and kills -9 a random trainer, shard or the coordinator at random times (10 kills,
# each process restarted with the same arguments), while the examples are produced and trained.
# Every trained example adds exactly 1 to a reserved counter row (trainer.debug.counter_key /
# pserver.debug.counter_key: no optimizer, no penalty, no compression). Once the run has drained
# (LATEST's manifest counts N examples), the counter in that checkpoint equals N exactly, and so
# does the manifest's example count: nothing lost, nothing applied twice, across every recovery.
# The mode is an argument: hybrid:10 (default), sync (two-phase steps: the counter's pushes wait
# for their step's commit like every row's), async, group:2 (semi-synchronous groups) and sync
# with a backup worker (COORD_SETTINGS coordinator.sync.backup=1: steps commit without the last
# trainer, whose contributions are dropped; its counter row is still counted, since it counts
# examples consumed, not gradients applied) are each a test.
# MODEL (default fm) deepfm trains DeepFM over the generator's 39 fields: its dense blocks go
# through the same pushes, steps and checkpoints, and block 0 must be in LATEST. TRAINER_SETTINGS
# are trainer properties (trainer.sync.rows=dense: only the bias and the dense blocks wait for the
# steps' commits, the embedding rows apply at once).
# usage: coord_exactly_once.sh SPARROW DIR CKPT_COUNTER [N] [CHAOS_SEED] [MODE] [COORD_SETTINGS]
#        [MODEL] [TRAINER_SETTINGS]
SPARROW=$1
DIR=$2
CKPT_COUNTER=$3
N=${4:-24000}
SEED=${5:-$((RANDOM % 1000 + 1))}
[ "$SEED" = random ] && SEED=$((RANDOM % 1000 + 1))
MODE=${6:-hybrid:10}
COORD_SET=()
for kv in ${7:-}; do
    [ "$kv" = - ] || COORD_SET+=(--set "coordinator:$kv") # -: none (an argument before MODEL)
done
MODEL=${8:-fm}
TRAINER_SET=(--set "trainer:trainer.model=$MODEL")
if [ "$MODEL" != fm ]; then
    FIELDS=$(printf 'I%d,' $(seq 1 13))$(printf 'C%d,' $(seq 1 26))
    TRAINER_SET+=(--set "trainer:trainer.fields=${FIELDS%,}" --set "trainer:trainer.mlp=32,16")
fi
for kv in ${9:-}; do
    TRAINER_SET+=(--set "trainer:$kv")
done
KEY=9000000000000000077
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/run/*.log")
FAIL_TAIL=15
echo "coord_exactly_once: N=$N chaos seed $SEED mode $MODE ${7:-} model $MODEL ${9:-}"
# The mock keeps about 5 MB per partition: N over 4 partitions stays within it, so a recovery can
# always replay from a checkpoint's offsets.
"$SPARROW" launch --run-dir "$DIR/run" --shards 2 --trainers 3 --partitions 4 --mode "$MODE" \
    --examples "$N" --rate 1500 --duration 900 --checkpoint-interval 2s \
    --kill trainer,pserver,coordinator --kills 10 --kill-interval 1000:3000 --restart-after 500 \
    --chaos-seed "$SEED" "${COORD_SET[@]}" "${TRAINER_SET[@]}" \
    --set trainer:trainer.debug.counter_key=$KEY --set pserver:pserver.debug.counter_key=$KEY \
    --set trainer:trainer.shutdown.grace=5s \
    --set trainer:kafka.session.timeout.ms=6000 --set trainer:kafka.heartbeat.interval.ms=500 \
    >"$DIR/launch.out" 2>&1 || fail "sparrow launch (see $DIR/launch.out): $(tail -n 5 "$DIR/launch.out")"
tail -n 3 "$DIR/launch.out"
summary_check "$DIR/run" "$N" <<'PY'
n = int(sys.argv[2])
want(s["examples_produced"] == n, "examples_produced != %d" % n)
kills = s.get("kills", s.get("chaos", {}).get("kills"))
want(kills == 10, "kills != 10: %r" % kills)
PY
check_latest_counter "$CKPT_COUNTER" "$DIR/run" "$KEY" "$N" produced
if [ "$MODEL" != fm ]; then # the first dense block (SPW_DENSE_KEY_BASE) is in the checkpoint
    "$CKPT_COUNTER" "$DIR/run" 18446744073692774400 >/dev/null ||
        fail "LATEST holds no dense block of the $MODEL model"
fi
if [[ " ${9:-} " == *" trainer.sync.rows=dense "* ]]; then # the trainers ran in that mode
    grep -q "sync_rows=dense" "$DIR"/run/trainer-*.log || fail "no trainer ran with sync_rows=dense"
fi
echo "coord_exactly_once: ok ($N examples produced, counted exactly once in the checkpoint after 10 kills)"
