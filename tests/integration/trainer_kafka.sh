#!/usr/bin/env bash
# `sparrow trainer` on Kafka input: `sparrow kafka-mock` as its own process, `sparrow ingest`
# turns generated JSON events into ExampleBatch records on topic "examples" (3 partitions), a
# malformed record is added by hand; the trainer (consumer group, in-process shard) trains every
# example, counts and skips the malformed record, stores and commits offsets once pushes are
# acknowledged, and a second trainer of the same group finds nothing left; SIGTERM then ends it
# with status 0.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
command -v kcat >/dev/null || { echo "kcat not installed"; exit 1; }
N=20000

mkfifo "$DIR/ctl"
"$SPARROW" kafka-mock --brokers 1 --topic events:1 --topic examples:3 --topic examples.dlq:1 \
    --port-file "$DIR/port" <"$DIR/ctl" >"$DIR/mock.out" 2>"$DIR/mock.log" &
PIDS+=("$!")
exec 3>"$DIR/ctl"
wait_for "the mock broker" 20 test -s "$DIR/port"
BS=$(cat "$DIR/port")
SETS=(--set kafka.session.timeout.ms=6000 --set kafka.heartbeat.interval.ms=500
    --set kafka.topic.metadata.refresh.interval.ms=1000)

# A malformed record first, so that it is read before the last good example.
echo "this is not an ExampleBatch" | timeout 30 kcat -P -b "$BS" -t examples -p 1 ||
    fail "kcat produce"
"$SPARROW" gen --n $N --seed 9 --format json --out "$DIR/events.json" 2>"$DIR/gen.log" || fail "gen"
timeout 60 "$SPARROW" ingest --in "file:$DIR/events.json" --out "kafka://$BS/examples" \
    --format json --batch-size 500 --set ingest.http.port=-1 --set ingest.key.field=C1 \
    --set ingest.key.buckets=16 "${SETS[@]}" 2>"$DIR/ingest.log" || fail "ingest"

timeout 90 "$SPARROW" trainer --in "kafka://$BS/examples" --shards inproc --model fm \
    --latent-dim 4 --batch 256 --backend cpu --max-examples $N --http-port -1 --group trainers \
    --set trainer.commit.interval=200ms "${SETS[@]}" >"$DIR/trainer1.log" 2>&1 ||
    fail "trainer 1 exit status"
grep ' finished ' "$DIR/trainer1.log" | sed 's/^.* finished /trainer 1: /'
[ "$(kv status "$DIR/trainer1.log")" = success ] || fail "trainer 1 status"
[ "$(kv examples "$DIR/trainer1.log")" = $N ] || fail "trainer 1 examples"
[ "$(kv rejected "$DIR/trainer1.log")" = 1 ] || fail "trainer 1 rejected"
check "$(kv offsets_stored "$DIR/trainer1.log") >= 3" "trainer 1 stored no offsets"
# progressive validation over the stream, oracle_p carried through ingest (learning itself is
# asserted on longer streams by trainer_pserver)
check "0.3 < $(kv window_logloss "$DIR/trainer1.log") < 0.7" "trainer 1 window logloss"
check "0.3 < $(kv bayes_logloss "$DIR/trainer1.log") < 0.6" "trainer 1 Bayes logloss (oracle_p)"

# The group committed everything trained: a second member finds nothing left to train.
"$SPARROW" trainer --in "kafka://$BS/examples" --shards inproc --model fm --latent-dim 4 \
    --batch 256 --backend cpu --http-port -1 --group trainers --set trainer.log.interval=300ms \
    "${SETS[@]}" >"$DIR/trainer2.log" 2>&1 &
TR=$!
PIDS+=("$TR")
wait_for "trainer 2's partitions" 30 grep -q "kafka partition assigned" "$DIR/trainer2.log"
sleep 2
kill -0 "$TR" 2>/dev/null || fail "trainer 2 exited"
kill -TERM "$TR"
rc=0
wait "$TR" || rc=$?
[ "$rc" -eq 0 ] || fail "trainer 2 exit status $rc after SIGTERM"
grep ' finished ' "$DIR/trainer2.log" | sed 's/^.* finished /trainer 2: /'
[ "$(kv examples "$DIR/trainer2.log")" = 0 ] || fail "trainer 2 trained committed examples again"
echo "trainer_kafka: ok"
