#!/usr/bin/env bash
# The cluster library of the integration scripts (sourced, not a test itself; the only place that
# defines these): process cleanup on EXIT, fail with the logs' tails, free ports, polls, the mock
# broker and shards on loopback, reading key=value fields of log lines, float checks. Scripts set
# DIR (their log directory) before using what writes there.
set -euo pipefail
PIDS=() # every background process a script starts: killed on exit
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    exec 3>&- 2>/dev/null || true # the mock's control fifo, when start_mock opened it
}
trap cleanup EXIT

# FAIL_LOGS: the globs whose tails fail prints ("default": every $DIR/*.log; () for none);
# FAIL_TAIL: how many lines of each.
FAIL_LOGS=(default)
FAIL_TAIL=20
fail() {
    echo "FAIL: $*"
    local pat f pats=("${FAIL_LOGS[@]}")
    [ "${pats[*]}" = default ] && pats=("${DIR:-.}/*.log")
    for pat in "${pats[@]}"; do
        for f in $pat; do
            [ -f "$f" ] || continue
            echo "== $f (tail)"
            grep -v '^DBG' "$f" | tail -"$FAIL_TAIL"
        done
    done
    exit 1
}

# wait_file PATH SECONDS: polls until PATH exists and is not empty; 1 when it never does.
wait_file() {
    local _
    for _ in $(seq 1 $(($2 * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
    return 1
}

# start_mock BROKERS TOPIC:PARTS...: `sparrow kafka-mock` in the current directory (ctl, port,
# mock.out, mock.err); sets BS, the bootstrap; fault commands go to fd 3.
start_mock() {
    local brokers=$1
    shift
    local args=() t
    for t in "$@"; do args+=(--topic "$t"); done
    rm -f ctl port
    mkfifo ctl
    "$SPARROW" kafka-mock --brokers "$brokers" "${args[@]}" --port-file port <ctl >mock.out \
        2>mock.err &
    PIDS+=("$!")
    exec 3>ctl
    wait_file port 20 || fail "mock did not start"
    BS=$(cat port)
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

# start_coord_trainer SHARDS COORD_PORT [ARGS...]: an FM trainer (k 4, batch 256, CPU) of group g,
# id 1, reading kafka://$BS/examples under the coordinator at COORD_PORT, ARGS last, logging to
# $DIR/trainer.log; sets TR and returns once the trainer has partitions.
start_coord_trainer() {
    local shards=$1 cport=$2
    shift 2
    "$SPARROW" trainer --in "kafka://$BS/examples" --shards "$shards" --model fm --latent-dim 4 \
        --batch 256 --backend cpu --group g --id 1 --http-port -1 \
        --set trainer.coordinator="tcp://127.0.0.1:$cport" "$@" >"$DIR/trainer.log" 2>&1 &
    TR=$!
    PIDS+=("$TR")
    wait_for "the trainer's assignment" 30 grep -q "partition assigned" "$DIR/trainer.log"
}

# start_gen N RATE: `sparrow gen` (seed 4; N 0: unending) producing RATE examples/s to
# kafka://$BS/examples, logging to $DIR/gen.log; sets GEN.
start_gen() {
    "$SPARROW" gen --n "$1" --seed 4 --rate "$2" --out "kafka://$BS/examples" 2>"$DIR/gen.log" &
    GEN=$!
    PIDS+=("$GEN")
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
