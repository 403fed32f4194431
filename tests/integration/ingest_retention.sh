#!/usr/bin/env bash
# Offsets lost to retention are loud: after the group's committed offset has been deleted by the
# mock's retention window, `sparrow ingest --strict true` logs it and exits 3; without strict it
# logs, counts and carries on from the earliest record still held.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"

start_mock 1 events:1 examples:1 examples.dlq:1
"$SPARROW" gen --n 10 --format json --out small.json 2>gen.err || fail "gen"
timeout 30 kcat -P -b "$BS" -t events <small.json || fail "produce small"

run_ingest() { # log strict
    "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
        --strict "$2" --set ingest.max_record_bytes=200000 "${KAFKA_TEST_SETS[@]}" 2>"$1" &
    ING=$!
    PIDS+=("$ING")
}
# First run: consume the 10 events and commit offset 10.
run_ingest ingest1.err true
for _ in $(seq 1 300); do
    [ "$(timeout 10 kcat -C -b "$BS" -t examples -e -q -f 'x\n' | wc -l)" -ge 1 ] && break
    sleep 0.1
done
sleep 1.5 # at least one commit interval
kill -TERM "$ING"
wait "$ING" || fail "first run exit status"

# The mock keeps about 5 MB per partition: 70 records of 100 KB push offset 10 out.
python3 -c "
import json
for i in range(70):
    print(json.dumps({'id': 1000 + i, 'label': 0, 'features': {'C1': 'x' * 100000}}))
" >big.json
timeout 60 kcat -P -b "$BS" -t events <big.json || fail "produce big"

run_ingest ingest2.err true
rc=0
for _ in $(seq 1 600); do kill -0 "$ING" 2>/dev/null || break; sleep 0.1; done
kill -0 "$ING" 2>/dev/null && fail "strict run did not exit"
wait "$ING" || rc=$?
[ "$rc" -eq 3 ] || fail "strict run exit status $rc, want 3"
grep -q "kafka offsets lost to retention topic=events partition=0 requested=10" ingest2.err ||
    fail "no loud retention line"

# Lenient: same report, then it goes on from the earliest record held.
run_ingest ingest3.err false
for _ in $(seq 1 100); do grep -q "offsets lost to retention" ingest3.err && break; sleep 0.2; done
grep -q "offsets lost to retention.*policy=earliest" ingest3.err || fail "lenient run: no report"
sleep 2
kill -TERM "$ING"
wait "$ING" || fail "lenient run exit status"
grep -q "ingest stopped events=[1-9]" ingest3.err || fail "lenient run read nothing"
echo PASS
