#!/usr/bin/env bash
# kill -9 `sparrow ingest` mid-stream and start it again in the same group: every input event
# reaches the output (at-least-once: duplicates are possible and are counted, losses are not).
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"

start_mock 1 events:4 examples:4 examples.dlq:1
"$SPARROW" gen --n 6000 --format json --out input.json 2>gen.err || fail "gen"
timeout 60 kcat -P -b "$BS" -t events <input.json || fail "produce"
N_IN=$(wc -l <input.json)
# Slow the broker down so that the kill lands mid-stream, whatever the machine's speed.
echo "rtt 1 100" >&3

start_ingest() { # log
    "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
        --batch-size 20 --linger 5ms --set ingest.commit.interval=50ms --set ingest.inflight=2 \
        "${KAFKA_TEST_SETS[@]}" 2>"$1" &
    ING=$!
    PIDS+=("$ING")
}
start_ingest ingest1.err
# Kill it once part of the stream is out (and some offsets were committed).
for _ in $(seq 1 300); do
    n=$(timeout 10 kcat -C -b "$BS" -t examples -e -q -f 'x\n' | wc -l || true) # a slow read is retried
    [ "$n" -ge 30 ] && break
    sleep 0.1
done
kill -9 "$ING"
wait "$ING" 2>/dev/null || true
dump_examples examples before.txt || fail "dump before"
N_BEFORE=$(wc -l <before.txt)
[ "$N_BEFORE" -lt "$N_IN" ] || fail "the first run finished before the kill"
grep -q "ingest stopped" ingest1.err && fail "the first run was not killed mid-stream"
echo "rtt 1 0" >&3

start_ingest ingest2.err
wait_all_examples "$N_IN"
[ "$N_UNIQ" -eq "$N_IN" ] || fail "lost events: $N_UNIQ distinct of $N_IN"
echo "examples before kill: $N_BEFORE; total: $N_EX; duplicates: $((N_EX - N_UNIQ))"
kill -TERM "$ING"
wait "$ING" || fail "ingest exit status $? after SIGTERM"
echo PASS
