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

start_ingest() { # log [--set ...]
    local log=$1
    shift
    "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
        --batch-size 20 --linger 5ms --set ingest.commit.interval=50ms --set ingest.inflight=2 \
        "${KAFKA_TEST_SETS[@]}" "$@" 2>"$log" &
    ING=$!
    PIDS+=("$ING")
}
HTTP_PORT=$(free_port)
start_ingest ingest1.err --set "ingest.http.port=$HTTP_PORT"
# Kill it once part of the stream is out (2 records of 20 examples; offsets are committed every
# 50 ms): inflight=2 and the broker's 100 ms round trip hold it to about 400 examples/s.
for _ in $(seq 1 600); do
    [ "$(ingest_produced "$HTTP_PORT")" -ge 2 ] && break
    sleep 0.05
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
