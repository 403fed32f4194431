#!/usr/bin/env bash
# The Kafka mock's fixed retention is loud (issue 18 §1): kafka-mock prints it at start and warns
# when a partition nears it and when it deleted records; a trainer whose committed offset was
# deleted logs the gap with what it means, counts it and says so in its finished line.
# usage: mock_retention.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=(mock.err "*.log")

# wait_line FILE TEXT SECONDS: polls until FILE holds TEXT (a fixed string).
wait_line() {
    local _
    for _ in $(seq 1 $(($3 * 10))); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    fail "$1 lacks after $3 s: $2"
}

start_mock 1 examples:1
grep -qF "mock retention bytes_per_partition=5242880 msgsets_per_partition=100000" mock.err ||
    fail "kafka-mock did not print its retention"

TRAIN=(trainer --in "kafka://$BS/examples" --shards inproc --http-port -1 --group g
    --set trainer.log.interval=0 --set kafka.session.timeout.ms=6000
    --set kafka.heartbeat.interval.ms=500)
# 10 ExampleBatch records of 256 examples (136 KB each, uncompressed: the sizes below count
# on it), trained and committed.
"$SPARROW" gen --n 2560 --rate 1000000 --compression none --out "kafka://$BS/examples" \
    2>gen1.log || fail "gen 1"
timeout 60 "$SPARROW" "${TRAIN[@]}" --set trainer.max_examples=2560 2>train1.log ||
    fail "first trainer run"
grep -qF "finished examples=2560 " train1.log || fail "first run did not train 2560 examples"

# 24 records more (34 held, 4.6 MB): the partition nears the mock's 5 MiB ...
"$SPARROW" gen --n 6144 --seed 2 --rate 1000000 --compression none \
    --out "kafka://$BS/examples" 2>gen2.log || fail "gen 2"
wait_line mock.err "kafka-mock partition nears its retention topic=examples partition=0" 20
# ... and 20 more pass it: the oldest records, the committed offset 10 among them, are deleted.
"$SPARROW" gen --n 5120 --seed 3 --rate 1000000 --compression none \
    --out "kafka://$BS/examples" 2>gen3.log || fail "gen 3"
wait_line mock.err "kafka-mock deleted records to its retention topic=examples partition=0" 20

# The group resumes at offset 10, which is gone: the gap is an ERROR saying what it means, the
# records are counted, and the run goes on from the earliest record held.
timeout 60 "$SPARROW" "${TRAIN[@]}" --set trainer.max_examples=512 2>train2.log ||
    fail "second trainer run"
grep -qF "kafka offsets lost to retention topic=examples partition=0 requested=10" train2.log ||
    fail "no loud gap line"
grep -qF "were deleted by the broker's retention before they were read: they are skipped" \
    train2.log || fail "the gap line does not say what it means"
lost=$(sed -n 's/.* finished .* lost_to_retention=\([0-9]*\) .*/\1/p' train2.log)
[ -n "$lost" ] && [ "$lost" -gt 0 ] || fail "finished line lost_to_retention='$lost'"
echo PASS
