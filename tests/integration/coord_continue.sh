#!/usr/bin/env bash
# coordinator.recovery=continue through real processes: two Kafka trainers (async, checkpoints
# every second) on two shards, trainer 2 killed -9 mid-stream. Nothing rolls back: no shard
# restores an epoch after the kill, trainer 1 neither restores nor seeks its own partitions and
# goes on checkpointing, and the dead trainer's partitions are consumed by trainer 1 from LATEST's
# offsets. At-least-once, counted: once drained, LATEST's example count is the N produced (the
# dead trainer's examples since LATEST were never reported, their new owner reports them once),
# and the counter row (every example trained adds 1 to it on the shards) is >= N and equals
# N + the re-trained count the coordinator reported, within the pushes the dead trainer had in
# flight when it was killed (pushes are asynchronous: at most 2 steps of 256 examples).
# usage: coord_continue.sh SPARROW DIR CKPT_COUNTER [N]
SPARROW=$1
DIR=$2
CKPT_COUNTER=$3
N=${4:-30000}
KEY=9000000000000000077
SLACK=512
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

start_broker examples:4
CK="$DIR/ck"
start_shards 2 5 --set pserver.checkpoint.dir="$CK" --set pserver.debug.counter_key=$KEY
# a Clock after every step (coordinator.async.clock_interval=0): the re-trained count below is
# checked to a batch, and with an interval a killed trainer's unclocked steps are not in it
start_coordinator async "$CK" --set coordinator.recovery=continue \
    --set coordinator.checkpoint.interval=1s --set coordinator.member.timeout=2s \
    --set coordinator.async.clock_interval=0
TARGS=(--set trainer.debug.counter_key=$KEY --set trainer.debug.delay_ms=5
    --set kafka.session.timeout.ms=6000 --set kafka.heartbeat.interval.ms=500
    --set trainer.shutdown.grace=3s)
TRAINER_ID=1 TRAINER_LOG="$DIR/trainer-1.log" start_coord_trainer "$SHARDS" "$COORD_PORT" "${TARGS[@]}"
T1=$TR
TRAINER_ID=2 TRAINER_LOG="$DIR/trainer-2.log" start_coord_trainer "$SHARDS" "$COORD_PORT" "${TARGS[@]}"
T2=$TR
# both hold partitions (the second's join moved some: no rollback under continue either)
wait_for "trainer 1's share" 30 grep -q "kafka partitions revoked" "$DIR/trainer-1.log"
# paced: the mock broker keeps only the last few MB of a partition
start_gen "$N" 2500
wait_for "two checkpoints with data" 60 bash -c \
    "grep 'checkpoint completed' '$DIR/coord.log' | grep -qv ' examples=0 '"
sleep 2
kill -9 "$T2"
wait "$T2" 2>/dev/null || true
T2_PARTS=$(grep -o 'kafka partition assigned topic=examples partition=[0-9]*' "$DIR/trainer-2.log" |
    tail -2 | grep -o '[0-9]*$' | sort -n | tr '\n' ' ')
mark() { wc -l <"$1"; }
S0=$(mark "$DIR/shard-0.log") S1=$(mark "$DIR/shard-1.log") L1=$(mark "$DIR/trainer-1.log")
wait_for "the removal" 20 grep -q "trainer removed without rollback" "$DIR/coord.log"
line=$(grep "trainer removed without rollback" "$DIR/coord.log" | tail -1)
RETRAINED=$(echo "$line" | grep -o ' retrained=[0-9]*' | cut -d= -f2)
# LATEST's offsets of the dead trainer's partitions are frozen from now on (only live reports
# move them): where the new owner must start
LATEST_LINE=$("$CKPT_COUNTER" "$CK" "$KEY") || fail "reading LATEST"
echo "coord_continue: killed trainer 2 (partitions $T2_PARTS); $line"
echo "coord_continue: LATEST at the removal: $LATEST_LINE"
wait_for "the takeover" 30 bash -c \
    "tail -n +$((L1 + 1)) '$DIR/trainer-1.log' | grep -q 'partition taken over from LATEST'"
sleep 0.5
for p in $T2_PARTS; do
    took=$(tail -n +$((L1 + 1)) "$DIR/trainer-1.log" | grep "partition taken over from LATEST partition=$p " |
        tail -1) || true
    [ -n "$took" ] || fail "trainer 1 did not take partition $p over"
    off=$(echo "$took" | grep -o ' offset=[0-9]*' | cut -d= -f2)
    skip=$(echo "$took" | grep -o ' skip=[0-9]*' | cut -d= -f2)
    echo "$LATEST_LINE" | grep -qE "offsets=(.*,)?$p:$off\+$skip(,|$)" ||
        fail "partition $p taken over at $off+$skip, not LATEST's ($LATEST_LINE)"
done
# trainer 1's own partitions went on from where it was
if tail -n +$((L1 + 1)) "$DIR/trainer-1.log" | grep -qE 'partitions seeked for a recovery|restored generation'; then
    fail "trainer 1 rolled back"
fi
own=$(tail -n +$((L1 + 1)) "$DIR/trainer-1.log" | grep -c 'partition taken over from LATEST' || true)
[ "$own" -eq 2 ] || fail "trainer 1 took $own partitions from LATEST, want the 2 of trainer 2"
before=$(grep -c "checkpoint reported" "$DIR/trainer-1.log")
wait_for "trainer 1's next checkpoints" 30 bash -c \
    "[ \$(grep -c 'checkpoint reported' '$DIR/trainer-1.log') -gt $((before + 1)) ]"
wait "$GEN" || fail "gen to Kafka"
drained() {
    local l
    l=$("$CKPT_COUNTER" "$CK" "$KEY" 2>/dev/null) || return 1
    [ "$(echo "$l" | sed -n 's/.*examples=\([0-9]*\).*/\1/p')" = "$N" ]
}
wait_for "LATEST to count the $N examples" 60 drained
LAST=$("$CKPT_COUNTER" "$CK" "$KEY")
echo "coord_continue: drained: $LAST"
for f in "$DIR/shard-0.log:$S0" "$DIR/shard-1.log:$S1"; do
    if tail -n +$((${f##*:} + 1)) "${f%:*}" | grep -q "restored epoch"; then
        fail "${f%:*} restored an epoch after the kill"
    fi
done
grep -q "recovery started.*trainer" "$DIR/coord.log" && fail "a trainer event started a recovery"
counter=$(echo "$LAST" | sed -n 's/.*counter=\([0-9]*\).*/\1/p')
check "$counter >= $N" "counter $counter < $N produced: examples lost"
check "abs($counter - ($N + $RETRAINED)) <= $SLACK" \
    "counter $counter != $N produced + $RETRAINED re-trained (slack $SLACK)"
echo "coord_continue: ok (N=$N counter=$counter retrained=$RETRAINED duplicates=$((counter - N)))"
kill -TERM "$T1"
wait "$T1" || fail "trainer 1 exit status after SIGTERM"
