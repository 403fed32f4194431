#!/usr/bin/env bash
# Recovery through real processes: one Kafka trainer under the coordinator (hybrid:10, checkpoint
# every 20 steps) with two shards; after a checkpoint epoch E, shard 1 is killed -9 and restarted:
# the coordinator sees a new StatsReply.started_ms, runs a recovery, both shards restore epoch E
# (RestoreRequest) and the trainer seeks back to the manifest's offsets and trains on.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

start_broker examples:2
CK="$DIR/ck"
start_shards 2 5 --set pserver.checkpoint.dir="$CK"
start_coordinator hybrid:10 "$CK" --set coordinator.checkpoint.steps=20
start_coord_trainer "$SHARDS" "$COORD_PORT" --set trainer.debug.delay_ms=20 \
    --set trainer.shutdown.grace=3s
# paced: the mock broker keeps only the last few dozen records of a partition
start_gen 30000 4000
wait_for "checkpoint epoch 2" 60 grep -q "checkpoint completed epoch=2 " "$DIR/coord.log"
# (an idle trainer's clock ticks, so checkpoints and recoveries may have run before the data)
recoveries=$(grep -c 'recovery completed .*epoch=[1-9]' "$DIR/coord.log" || true)
kill -9 "${SHARD_PIDS[1]}"
wait "${SHARD_PIDS[1]}" 2>/dev/null || true
start_shard 1 2 "${SHARD_PORTS[1]}" 5 --set pserver.checkpoint.dir="$CK"
wait_for "the recovery" 30 bash -c \
    "[ \$(grep -c 'recovery completed .*epoch=[1-9]' '$DIR/coord.log') -gt $recoveries ]"
E=$(grep 'recovery completed .*epoch=[1-9]' "$DIR/coord.log" | tail -1 | grep -o ' epoch=[0-9]*' | cut -d= -f2)
grep -q "shard restarted" "$DIR/coord.log" || fail "the coordinator did not see the restart"
grep -q "restored epoch=$E " "$DIR/shard-0.log" || fail "shard 0 did not restore epoch $E"
grep -q "restored epoch=$E " "$DIR/shard-1.log" || fail "shard 1 did not restore epoch $E"
grep -q "partitions seeked for a recovery partitions=2" "$DIR/trainer.log" ||
    fail "the trainer did not seek its partitions"
before=$(grep -c "checkpoint reported" "$DIR/trainer.log")
wait_for "a checkpoint after the recovery" 60 bash -c \
    "[ \$(grep -c 'checkpoint reported' '$DIR/trainer.log') -gt $before ]"
wait "$GEN" || fail "gen to Kafka"
echo "coord_recovery: shard 1 killed after epoch 2; both shards restored epoch $E, trainer re-seeked and checkpointed again"
kill -TERM "$TR"
wait "$TR" || fail "trainer exit status after SIGTERM"
# The trainer's Leave removes it at once, and the coordinator rolls the shards back to LATEST
# (its pushes after LATEST are not in any checkpoint); that recovery must end before the next.
wait_for "the leave's recovery" 30 grep -q 'reason="trainer removed"' "$DIR/coord.log"
g=$(grep 'reason="trainer removed"' "$DIR/coord.log" | tail -1 | grep -o 'generation=[0-9]*')
wait_for "the leave's recovery to complete" 30 grep -q "recovery completed $g " "$DIR/coord.log"

# Pruning kept coordinator.checkpoint.keep (3) complete epochs (those with a MANIFEST), LATEST the
# newest. An epoch that the leave's recovery abandoned may also be there, with shard checkpoints
# and no MANIFEST: epoch numbers are never reused, and the next checkpoint's prune removes such
# orphans (none follows here: the only trainer has gone).
complete() {
    for d in "$CK"/checkpoints/[0-9]*; do if [ -s "$d/MANIFEST" ]; then basename "$d"; fi; done | sort -n
}
L=$(cat "$CK/checkpoints/LATEST")
kept=$(complete | wc -l)
[ "$kept" -eq 3 ] || fail "$kept complete epochs kept, want 3: $(ls "$CK/checkpoints" | tr '\n' ' ')"
[ "$(complete | tail -1)" = "$L" ] || fail "LATEST $L is not the newest complete epoch"
# A corrupt shard checkpoint in LATEST: the next recovery (shard 0 restarted) moves both shards
# back to the previous epoch together.
P=$(complete | tail -2 | head -1)
# (a copy: the epochs' SST files are hard links of one another, RocksDB checkpoints share them)
sst=$(ls "$CK/checkpoints/$L/shard-1/"*.sst | head -1)
cp "$sst" "$sst.tmp" && printf 'corrupt' | dd of="$sst.tmp" bs=1 seek=64 conv=notrunc 2>/dev/null
mv "$sst.tmp" "$sst"
recoveries=$(grep -c 'recovery completed' "$DIR/coord.log" || true)
kill -9 "${SHARD_PIDS[0]}" 2>/dev/null
wait "${SHARD_PIDS[0]}" 2>/dev/null || true
start_shard 0 2 "${SHARD_PORTS[0]}" 5 --set pserver.checkpoint.dir="$CK"
wait_for "the recovery after the corruption" 60 bash -c \
    "[ \$(grep -c 'recovery completed' '$DIR/coord.log') -gt $recoveries ]"
grep 'recovery completed' "$DIR/coord.log" | tail -1 | grep -q " epoch=$P " ||
    fail "the recovery did not fall back to epoch $P: $(grep 'recovery' "$DIR/coord.log" | tail -2)"
grep -q "restored epoch=$P " "$DIR/shard-0.log" || fail "shard 0 did not restore epoch $P"
grep -q "restored epoch=$P " "$DIR/shard-1.log" || fail "shard 1 did not restore epoch $P"
echo "coord_recovery: LATEST $L's shard-1 corrupted; both shards restored epoch $P together"
echo "coord_recovery: ok"
