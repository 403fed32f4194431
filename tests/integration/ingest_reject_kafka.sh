#!/usr/bin/env bash
# A Kafka input is judged once, over its first 1000 events (ingest.max_reject_ratio): the wrong
# format fails the run (exit 1) naming it; auto takes the format of the first record, and once the
# first 1000 passed later bad events are only counted.
# usage: ingest_reject_kafka.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"

start_mock 1 raw:1 examples:1 examples.dlq:1
"$SPARROW" gen --n 1200 --format criteo --out raw.tsv 2>gen.log || fail "gen"
timeout 30 kcat -P -b "$BS" -t raw <raw.tsv || fail "produce"

# Read as JSON: every event refused; the verdict comes at the 1000th.
rc=0
timeout 60 "$SPARROW" ingest --in "kafka://$BS/raw" --out "kafka://$BS/examples" --format json \
    --group wrong "${KAFKA_TEST_SETS[@]}" 2>ingest_wrong.err || rc=$?
[ "$rc" -eq 1 ] || fail "wrong format: exit $rc, want 1"
grep -qF "1000 of 1000 records rejected (100%, above ingest.max_reject_ratio=0.5)" ingest_wrong.err ||
    fail "no verdict line"
grep -qF "the events were read as ingest.format=json; check the topic's format (judged over the first 1000 events)" \
    ingest_wrong.err || fail "the verdict does not name the format"

# auto: Criteo from the first record, judged fine at 1000, then a stream of garbage is only counted.
"$SPARROW" ingest --in "kafka://$BS/raw" --out "kafka://$BS/examples" --group auto \
    "${KAFKA_TEST_SETS[@]}" 2>ingest_auto.err &
ING=$!
PIDS+=("$ING")
for _ in $(seq 1 300); do grep -q "input reject share checked" ingest_auto.err && break; sleep 0.1; done
grep -qF "input format detected in=raw format=criteo (from the first record)" ingest_auto.err ||
    fail "auto did not detect criteo"
grep -qF "input reject share checked events=1000 rejected=0" ingest_auto.err || fail "no check line"
seq 1 1500 | timeout 30 kcat -P -b "$BS" -t raw || fail "produce garbage"
for _ in $(seq 1 300); do
    grep -q "event dead-lettered" ingest_auto.err && break
    sleep 0.1
done
sleep 1
kill -0 "$ING" 2>/dev/null || fail "later bad events stopped the run"
kill -TERM "$ING"
wait "$ING" || fail "auto run exit status"
grep -q "ingest stopped events=[0-9]* examples=1200 rejected=[1-9]" ingest_auto.err ||
    fail "auto run: $(grep 'ingest stopped' ingest_auto.err)"
echo PASS
