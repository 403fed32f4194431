#!/usr/bin/env bash
# The cluster library of the integration scripts (sourced, not a test itself): process cleanup on
# EXIT, fail with the logs' tails, free ports, polls, shards on loopback, reading key=value fields
# of log lines, float checks. Scripts set DIR (their log directory) before using it.
set -euo pipefail
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    local f
    for f in "$DIR"/*.log; do
        [ -f "$f" ] || continue
        echo "== $f (tail)"
        grep -v '^DBG' "$f" | tail -20
    done
    exit 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_shard I N PORT DIM [ARGS...]: shard I of N in the background, appending to shard-I.log;
# sets SHARD_PID. The trainer's client waits for shards, so no readiness probe is needed.
start_shard() {
    local i=$1 n=$2 port=$3 dim=$4
    shift 4
    "$SPARROW" pserver --listen "tcp://127.0.0.1:$port" --shard "$i" --shards "$n" --dim "$dim" \
        --data-dir "$DIR/shard-$i" --http-port 0 --memory-mb 64 "$@" >>"$DIR/shard-$i.log" 2>&1 &
    SHARD_PID=$!
    PIDS+=("$SHARD_PID")
}

# kv KEY FILE: the value of KEY= in the last "finished" line of FILE.
kv() {
    grep ' finished ' "$2" | tail -1 | grep -o " $1=[^ ]*" | head -1 | cut -d= -f2 | tr -d '"'
}

# check "PYTHON EXPRESSION" WHAT: fails the test with WHAT unless the expression holds.
check() {
    python3 -c "import sys; sys.exit(0 if ($1) else 1)" || fail "$2 ($1)"
}

# wait_for WHAT SECONDS CMD...: polls CMD every 0.1 s.
wait_for() {
    local what=$1 secs=$2
    shift 2
    local _
    for _ in $(seq 1 $((secs * 10))); do
        if "$@"; then
            return 0
        fi
        sleep 0.1
    done
    fail "timed out waiting for $what"
}
