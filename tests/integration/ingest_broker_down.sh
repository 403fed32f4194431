#!/usr/bin/env bash
# `sparrow ingest` while mock brokers go down and come back (`down`/`up` on the mock's stdin):
# every input event reaches the output; nothing is lost.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"

start_mock 3 events:6 examples:6 examples.dlq:1
"$SPARROW" gen --n 3000 --format json --out input.json 2>gen.err || fail "gen"
split -l 1000 input.json part.
timeout 60 kcat -P -b "$BS" -t events <part.aa || fail "produce 1"

"$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
    --batch-size 50 --linger 20ms --set kafka.message.timeout.ms=120000 \
    "${KAFKA_TEST_SETS[@]}" 2>ingest.err &
ING=$!
PIDS+=("$ING")
for _ in $(seq 1 100); do grep -q "partition assigned" ingest.err && break; sleep 0.1; done

# Take brokers down in turn while more input arrives.
echo "down 2" >&3
# Records for partitions led by broker 2 wait in the producer until it is back.
timeout 120 kcat -P -b "$BS" -t events -X message.timeout.ms=100000 <part.ab &
KC=$!
PIDS+=("$KC")
sleep 2
echo "up 2" >&3
wait "$KC" || fail "produce 2"
echo "down 3" >&3
sleep 2
echo "up 3" >&3
echo "rtt 1 50" >&3
timeout 60 kcat -P -b "$BS" -t events <part.ac || fail "produce 3"
echo "rtt 1 0" >&3

N_IN=$(wc -l <input.json)
wait_all_examples "$N_IN"
[ "$N_UNIQ" -eq "$N_IN" ] || fail "lost events: $N_UNIQ distinct of $N_IN"
awk '{print $2}' ex.txt | sort -n | uniq | awk -v n="$N_IN" 'NR-1 != $1 {exit 1} END {exit NR != n}' ||
    fail "ids are not 0..N-1"
echo "duplicates: $((N_EX - N_UNIQ))"
N_DLQ=$(timeout 30 kcat -C -b "$BS" -t examples.dlq -e -q -f 'x\n' | wc -l)
[ "$N_DLQ" -eq 0 ] || fail "unexpected dead letters: $N_DLQ"
kill -TERM "$ING"
wait "$ING" || fail "ingest exit status $? after SIGTERM"
echo PASS
