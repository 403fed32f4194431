#!/usr/bin/env bash
# `sparrow coordinator`: starts, answers a registration (log), writes nothing without trainers,
# refuses a bad mode, and stops cleanly on SIGTERM. Args: sparrow binary, scratch dir.
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
if "$SPARROW" coordinator --mode ssp:x --checkpoint-dir "$DIR" 2>"$DIR/bad.log"; then
    echo "FAIL: a malformed mode was accepted"; exit 1
fi
grep -q "coordinator.mode" "$DIR/bad.log" || { echo "FAIL: the error does not name the key"; exit 1; }
"$SPARROW" coordinator --mode hybrid:10 --dump-config | grep -c "coordinator.mode = hybrid:10" >/dev/null
"$SPARROW" coordinator --listen tcp://127.0.0.1:0 --mode sync --checkpoint-dir "$DIR" \
    --set coordinator.startup.grace=0 2>"$DIR/coord.log" &
PID=$!
for _ in $(seq 100); do
    grep -q "recovery completed" "$DIR/coord.log" && break
    sleep 0.1
done
grep -q "recovery completed" "$DIR/coord.log" || { cat "$DIR/coord.log"; echo "FAIL: no start"; exit 1; }
kill -TERM "$PID"
wait "$PID" || { echo "FAIL: exit status $?"; exit 1; }
grep -q "coordinator stopped" "$DIR/coord.log"
echo "PASS"
