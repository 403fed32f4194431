#!/usr/bin/env bash
# `sparrow kafka-mock`: kcat produces and consumes through it; fault commands on stdin apply or
# are refused; SIGTERM and (with --stdin-eof-exits) end of stdin stop it with status 0.
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=(mock.err)
command -v kcat >/dev/null || { echo "kcat not installed"; exit 1; }


mkfifo ctl
"$SPARROW" kafka-mock --brokers 3 --topic events:4 --topic other:1 --port-file port \
    <ctl >mock.out 2>mock.err &
MOCK=$!
PIDS+=("$MOCK")
exec 3>ctl
wait_file port 20 || fail "no port file"
BS=$(cat port)
[ "$(head -1 mock.out)" = "$BS" ] || fail "stdout '$(head -1 mock.out)' != port file '$BS'"
case "$BS" in 127.0.0.1:*,127.0.0.1:*,127.0.0.1:*) ;; *) fail "bootstrap '$BS'" ;; esac

# kcat metadata sees both topics with their partition counts.
timeout 20 kcat -b "$BS" -L -J >meta.json || fail "kcat -L"
python3 - <<'PY' || fail "metadata"
import json
m = json.load(open("meta.json"))
parts = {t["topic"]: len(t["partitions"]) for t in m["topics"]}
assert parts.get("events") == 4 and parts.get("other") == 1, parts
assert len(m["brokers"]) == 3, m["brokers"]
PY

# Produce 100 keyed messages, consume them back.
for i in $(seq 1 100); do echo "user$((i % 7)):value-$i"; done >in.txt
timeout 30 kcat -P -b "$BS" -t events -K: <in.txt || fail "kcat produce"
timeout 30 kcat -C -b "$BS" -t events -e -q -f '%k:%s\n' >got.txt || fail "kcat consume"
[ "$(sort in.txt)" = "$(sort got.txt)" ] || fail "consumed records differ from produced"
# Keyed records: each key lands in exactly one partition.
timeout 30 kcat -C -b "$BS" -t events -e -q -f '%k %p\n' | sort -u | awk '{print $1}' | uniq -d \
    >dupkeys.txt
[ ! -s dupkeys.txt ] || fail "a key spread over partitions: $(cat dupkeys.txt)"

# Fault commands: good ones are applied, bad ones refused, the mock keeps running.
echo "rtt 1 5" >&3
echo "error Produce NOT_ENOUGH_REPLICAS 2" >&3
echo "down 2" >&3
echo "up 2" >&3
echo "down 9" >&3
echo "frobnicate" >&3
echo "error Nope 1 1" >&3
echo "# a comment" >&3
echo "topic late 2" >&3
for _ in $(seq 1 50); do grep -q 'line="topic late 2"' mock.err && break; sleep 0.1; done
for c in "rtt 1 5" "error Produce NOT_ENOUGH_REPLICAS 2" "down 2" "up 2" "topic late 2"; do
    grep -q "command applied line=\"$c\"" mock.err || fail "not applied: $c"
done
for c in "down 9" "frobnicate" "error Nope 1 1"; do
    grep -q "command refused line=\"$c\"" mock.err || fail "not refused: $c"
done
# Produce survives the injected errors (retried by the client).
echo "after-faults" | timeout 30 kcat -P -b "$BS" -t other || fail "produce after faults"
timeout 30 kcat -C -b "$BS" -t other -e -q | grep -qx after-faults || fail "after-faults lost"

# SIGTERM: exit 0 and the port file is removed.
kill -TERM "$MOCK"
wait "$MOCK" || fail "exit status $? after SIGTERM"
[ ! -e port ] || fail "port file left behind"
exec 3>&-

# stdin EOF keeps it running by default; --stdin-eof-exits ends it.
"$SPARROW" kafka-mock --port-file port2 </dev/null >/dev/null 2>mock2.err &
M2=$!
PIDS+=("$M2")
wait_file port2 20 || fail "no port2"
sleep 0.5
kill -0 "$M2" || fail "mock exited at stdin EOF without --stdin-eof-exits"
kill -INT "$M2"
wait "$M2" || fail "exit status after SIGINT"
timeout 20 "$SPARROW" kafka-mock --stdin-eof-exits </dev/null >/dev/null 2>mock3.err ||
    fail "--stdin-eof-exits did not exit 0"

# Bad arguments are refused.
if "$SPARROW" kafka-mock --brokers 0 </dev/null >/dev/null 2>&1; then fail "--brokers 0"; fi
if "$SPARROW" kafka-mock --topic bad/name:2 --stdin-eof-exits </dev/null >/dev/null 2>&1; then
    fail "bad topic name"
fi
echo "PASS"
