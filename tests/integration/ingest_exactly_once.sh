#!/usr/bin/env bash
# Exactly-once from the raw event (issue 17 §2): raw JSON events (valid and invalid lines) are
# produced at a paced rate to `events`; `sparrow ingest` turns them into ExampleBatch records of
# `examples` (each example carrying its source partition and offset); 2 trainers under a hybrid
# coordinator train them into 2 shards. Every trained example adds 1 to a counter row
# (trainer.debug.counter_key / pserver.debug.counter_key). Meanwhile 12 random `kill -9` hit
# ingest (at least 3 times: it replays raw events since its last commit, which re-produces
# examples), the trainers, the shards and the coordinator, each restarted. Once drained, the
# counter in LATEST equals the number of valid raw events exactly (replayed duplicates are dropped
# by the trainers' source high-water marks, which the manifest restores at every recovery), and
# every invalid raw event is in the dead-letter topic.
# usage: ingest_exactly_once.sh SPARROW DIR CKPT_COUNTER [N] [CHAOS_SEED]
SPARROW=$1
DIR=$2
CKPT=$3
N=${4:-6000}
SEED=${5:-$((RANDOM % 1000 + 1))}
KEY=9000000000000000077
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh" # the cluster library, dump_examples
FAIL_LOGS=("$DIR/*.log")
FAIL_TAIL=12
echo "ingest_exactly_once: N=$N chaos seed $SEED"
KSETS=(--set kafka.session.timeout.ms=6000 --set kafka.heartbeat.interval.ms=500)

# the raw events: about 1 in 10 invalid (not JSON, a label out of range, features not an object),
# each invalid line unique so that the dead-letter topic can be checked line by line
python3 - "$N" "$SEED" "$DIR" <<'PY'
import json, random, sys
n, seed, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
valid = bad = 0
with open(d + "/events.json", "w") as out, open(d + "/invalid.txt", "w") as inv:
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            kind = i % 3
            line = ("garbage-%d {" % i if kind == 0 else
                    json.dumps({"label": 7, "id": i, "features": {"user": "u%d" % i}}) if kind == 1
                    else json.dumps({"label": 1, "id": i, "features": "bad-%d" % i}))
            inv.write(line + "\n")
            bad += 1
        else:
            line = json.dumps({"label": int(rng.random() < 0.3), "id": i,
                               "features": {"user": "u%d" % rng.randrange(500),
                                            "item": "i%d" % rng.randrange(200)}})
            valid += 1
        out.write(line + "\n")
open(d + "/valid.count", "w").write("%d\n" % valid)
PY
VALID=$(cat "$DIR/valid.count")
N_BAD=$(wc -l <"$DIR/invalid.txt")

start_broker events:4 examples:4 examples.dlq:1
start_shards 2 5 --set "pserver.checkpoint.dir=$DIR/ck" --set "pserver.debug.counter_key=$KEY"
COORD_PORT=$(free_port)
coord_up() {
    "$SPARROW" coordinator --listen "tcp://127.0.0.1:$COORD_PORT" --mode hybrid:10 \
        --shards "$SHARDS" --checkpoint-dir "$DIR/ck" --set coordinator.startup.grace=2s \
        --set coordinator.checkpoint.interval=1500ms --set coordinator.member.timeout=4s \
        >>"$DIR/coord.log" 2>&1 &
    COORD=$!
    PIDS+=("$COORD")
}
trainer_up() { # ID
    "$SPARROW" trainer --in "kafka://$BS/examples" --shards "$SHARDS" --model fm --latent-dim 4 \
        --batch 64 --backend cpu --group g --id "$1" --http-port -1 \
        --set trainer.coordinator="tcp://127.0.0.1:$COORD_PORT" \
        --set "trainer.debug.counter_key=$KEY" --set trainer.shutdown.grace=3s "${KSETS[@]}" \
        >>"$DIR/trainer-$1.log" 2>&1 &
    TRAINER[$1]=$!
    PIDS+=("$!")
}
ingest_up() {
    ING_ASSIGNED=$(cat "$DIR/ingest.log" 2>/dev/null | grep -c "partition assigned" || true)
    "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
        --batch-size 20 --linger 5ms --set ingest.commit.interval=3s --set ingest.http.port=-1 \
        "${KSETS[@]}" >>"$DIR/ingest.log" 2>&1 &
    ING=$!
    PIDS+=("$ING")
}
coord_up
declare -A TRAINER
trainer_up 1
trainer_up 2
ingest_up
wait_for "the first recovery" 40 grep -q "recovery completed" "$DIR/coord.log"

# the events, paced: 40 chunks over about 20 s
split -n l/40 -d -a 2 "$DIR/events.json" "$DIR/chunk."
(for f in "$DIR"/chunk.*; do kcat -P -b "$BS" -t events <"$f" || exit 1; sleep 0.5; done) &
PRODUCER=$!
PIDS+=("$PRODUCER")

# 12 kills: ingest 3 times at least, the first of them while the events flow (ingest commits its
# input offsets every 3 s, so that kill replays what it wrote since: the duplicates this test is
# about), then any role in a random order. Ingest is killed only once it holds its partitions (a
# restarted ingest waits for the killed member's session to time out): a kill before that
# replays nothing.
ingest_assigned() { [ "$(grep -c "partition assigned" "$DIR/ingest.log" || true)" -gt "${ING_ASSIGNED:-0}" ]; }
python3 -c "
import random
r = random.Random($SEED)
roles = ['ingest'] * 2 + [r.choice(['ingest', 'trainer1', 'trainer2', 'shard0', 'shard1', 'coordinator']) for _ in range(9)]
r.shuffle(roles)
print(' '.join(['ingest'] + roles))" >"$DIR/kills.txt"
echo "ingest_exactly_once: kills $(cat "$DIR/kills.txt")"
RANDOM=$SEED
for role in $(cat "$DIR/kills.txt"); do
    [ "$role" != ingest ] || wait_for "ingest's partitions" 40 ingest_assigned
    sleep "$((RANDOM % 1500 + 1000))e-3"
    case $role in
    ingest) kill -9 "$ING" ;;
    trainer1) kill -9 "${TRAINER[1]}" ;;
    trainer2) kill -9 "${TRAINER[2]}" ;;
    shard0) kill -9 "${SHARD_PIDS[0]}" ;;
    shard1) kill -9 "${SHARD_PIDS[1]}" ;;
    coordinator) kill -9 "$COORD" ;;
    esac
    wait 2>/dev/null -n || true
    sleep 0.5
    case $role in
    ingest) ingest_up ;;
    trainer1) trainer_up 1 ;;
    trainer2) trainer_up 2 ;;
    shard0 | shard1)
        i=${role#shard}
        start_shard "$i" 2 "${SHARD_PORTS[$i]}" 5 --set "pserver.checkpoint.dir=$DIR/ck" \
            --set "pserver.debug.counter_key=$KEY"
        SHARD_PIDS[$i]=$SHARD_PID
        ;;
    coordinator) coord_up ;;
    esac
done
wait "$PRODUCER" || fail "producing the events"

# drain: a checkpoint counts every valid event
# (one counting more means duplicates were trained: fail at once)
drained() {
    local n
    n=$(grep -o "checkpoint completed epoch=[0-9]* examples=[0-9]*" "$DIR/coord.log" | tail -1 |
        sed 's/.*examples=//')
    [ "${n:-0}" -le "$VALID" ] || fail "a checkpoint counts $n examples, more than the $VALID valid events"
    [ "${n:-0}" -eq "$VALID" ]
}
wait_for "a checkpoint of all $VALID valid events" 60 drained
check_latest_counter "$CKPT" "$DIR/ck" "$KEY" "$VALID" "valid events"

# every invalid event is in the dead-letter topic (replays may put one there twice)
timeout 30 kcat -C -b "$BS" -t examples.dlq -e -q -f '%s\n' >"$DIR/dlq.txt" || fail "reading the dlq"
python3 - "$DIR/invalid.txt" "$DIR/dlq.txt" <<'PY' || fail "dead-letter topic"
import sys
want = set(open(sys.argv[1]).read().splitlines())
got = set(open(sys.argv[2]).read().splitlines())
missing = want - got
if missing:
    print("invalid events missing from the dlq: %d of %d, e.g. %r" % (len(missing), len(want), sorted(missing)[:3]))
    sys.exit(1)
PY
# the stream held duplicates (ingest replayed events after its kills): without the trainers'
# source high-water marks the counter would be above VALID
dump_examples examples "$DIR/examples.txt" || fail "reading the examples topic"
written=$(wc -l <"$DIR/examples.txt")
[ "$written" -gt "$VALID" ] || fail "no replayed duplicates in the examples topic ($written examples written, $VALID valid): the test did not exercise them"
# the duplicates the trainers dropped (the trainers still running report them at their stop)
kill -TERM "${TRAINER[1]}" "${TRAINER[2]}" 2>/dev/null || true
wait "${TRAINER[1]}" "${TRAINER[2]}" 2>/dev/null || true
dups=0
for i in 1 2; do
    d=$(kv duplicates "$DIR/trainer-$i.log")
    dups=$((dups + ${d:-0}))
done
replays=$(grep -c "ingest started" "$DIR/ingest.log")
echo "ingest_exactly_once: ok ($VALID valid of $N raw events counted exactly once after 12 kills; $N_BAD invalid all in the dlq; ingest started $replays times; $((written - VALID)) duplicate examples written; duplicates dropped by the last trainer processes: $dups)"
