#!/usr/bin/env bash
# `sparrow coordinator`: refuses a bad mode and a configuration without shards (naming the key),
# dumps its configuration, starts with one `sparrow pserver` shard (its startup recovery asks the
# shard), writes nothing without trainers, and stops cleanly on SIGTERM. Args: sparrow binary,
# scratch dir.
set -euo pipefail
SPARROW=$1
DIR=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster_lib.sh"
rm -rf "$DIR" && mkdir -p "$DIR"
if "$SPARROW" coordinator --mode ssp:x --shards tcp://127.0.0.1:9 --checkpoint-dir "$DIR" \
    2>"$DIR/bad.log"; then
    fail "a malformed mode was accepted"
fi
grep -q "coordinator.mode" "$DIR/bad.log" || fail "the error does not name the key"
if "$SPARROW" coordinator --checkpoint-dir "$DIR" 2>"$DIR/noshards.log"; then
    fail "a coordinator without shards was accepted"
fi
grep -q "coordinator.shards is empty" "$DIR/noshards.log" ||
    fail "the error does not name coordinator.shards"
"$SPARROW" coordinator --mode hybrid:10 --dump-config | grep -c "coordinator.mode = hybrid:10" >/dev/null
start_shards 1 4 --set "pserver.checkpoint.dir=$DIR/ck"
COORD_LOG=$DIR/coord.log start_coordinator sync "$DIR/ck" --set coordinator.startup.grace=0
wait_for "the coordinator's start (its startup recovery)" 10 grep -q "recovery completed" \
    "$DIR/coord.log"
kill -TERM "$COORD"
wait "$COORD" || fail "exit status $?"
grep -q "coordinator stopped" "$DIR/coord.log" || fail "no clean stop"
[ -z "$(ls -A "$DIR/ck" 2>/dev/null)" ] || fail "wrote a checkpoint without trainers: $(ls "$DIR/ck")"
echo "PASS"
