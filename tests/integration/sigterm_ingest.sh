#!/usr/bin/env bash
# SIGTERM `sparrow ingest` while events flow in: it exits 0 within the ingest Deployment's
# terminationGracePeriodSeconds (deploy/k8s), having delivered every example of the events whose
# offsets it committed and committed every event it delivered: a second run in the same group
# completes the stream with no event lost and none repeated.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"
K8S="$(dirname "${BASH_SOURCE[0]}")/../../deploy/k8s/base"
GRACE=$(grep -o 'terminationGracePeriodSeconds: [0-9]*' "$K8S/ingest.yaml" | grep -o '[0-9]*$')
[ -n "$GRACE" ] || fail "no terminationGracePeriodSeconds in ingest.yaml"

start_mock 1 events:4 examples:4 examples.dlq:1
"$SPARROW" gen --n 12000 --format json --out input.json 2>gen.err || fail "gen"
N_IN=$(wc -l <input.json)
start_ingest() { # log [--set ...]
    local log=$1
    shift
    "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
        --batch-size 50 --linger 5ms --set ingest.commit.interval=200ms \
        "${KAFKA_TEST_SETS[@]}" "$@" 2>"$log" &
    ING=$!
    PIDS+=("$ING")
}
HTTP_PORT=$(free_port)
start_ingest ingest1.err --set "ingest.http.port=$HTTP_PORT"
wait_file_grep() { # pattern file timeout_s
    local i
    for i in $(seq 1 $(($3 * 10))); do grep -q "$1" "$2" && return 0; sleep 0.1; done
    return 1
}
wait_file_grep "partition assigned" ingest1.err 30 || fail "ingest got no partitions"
# events flow at about 1500/s while ingest runs
python3 - input.json <<'PY' | timeout 120 kcat -P -b "$BS" -t events 2>kcat.err &
import sys, time
for i, line in enumerate(open(sys.argv[1])):
    sys.stdout.write(line)
    if i % 150 == 149:
        sys.stdout.flush()
        time.sleep(0.1)
PY
FEED=$!
PIDS+=("$FEED")

# SIGTERM once part of the stream is out (2 records of 50 examples)
for _ in $(seq 1 600); do
    [ "$(ingest_produced "$HTTP_PORT")" -ge 2 ] && break
    sleep 0.05
done
t0=$(date +%s.%N)
kill -TERM "$ING"
timeout "$GRACE" tail -s 0.1 --pid="$ING" -f /dev/null ||
    fail "ingest still running $GRACE s after SIGTERM"
rc=0
wait "$ING" || rc=$?
elapsed=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
[ "$rc" -eq 0 ] || fail "ingest exited $rc after SIGTERM"
echo "ingest: exit 0 $elapsed s after SIGTERM (grace $GRACE s)"
grep -q "undelivered" ingest1.err && fail "ingest reported undelivered output"
dump_examples examples before.txt || fail "dump before"
N_BEFORE=$(wc -l <before.txt)
[ "$N_BEFORE" -lt "$N_IN" ] || fail "the first run finished the stream before SIGTERM"
wait "$FEED" || fail "feeding the events"

start_ingest ingest2.err
wait_all_examples "$N_IN"
echo "ingest: examples out at SIGTERM $N_BEFORE of $N_IN; after a second run $N_UNIQ distinct," \
    "$((N_EX - N_UNIQ)) repeated"
[ "$N_UNIQ" -eq "$N_IN" ] || fail "lost events: $N_UNIQ distinct of $N_IN"
[ "$N_EX" -eq "$N_UNIQ" ] ||
    fail "$((N_EX - N_UNIQ)) events repeated: delivered before SIGTERM but not committed"
kill -TERM "$ING"
wait "$ING" || fail "ingest exit status $? after SIGTERM"
echo "sigterm_ingest: ok"
