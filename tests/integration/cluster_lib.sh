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
            grep -v -e '^DBG' -e '^[^ ]* DEBUG ' "$f" | tail -"$FAIL_TAIL"
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

# start_broker TOPIC:PARTS...: a one-broker `sparrow kafka-mock` writing $DIR/port (its bootstrap)
# and $DIR/mock.log; sets BS and MOCK. (start_mock is the one with fault commands.)
start_broker() {
    local args=() t
    for t in "$@"; do args+=(--topic "$t"); done
    "$SPARROW" kafka-mock --brokers 1 "${args[@]}" --port-file "$DIR/port" >"$DIR/mock.out" \
        2>"$DIR/mock.log" &
    MOCK=$!
    PIDS+=("$MOCK")
    wait_for "the mock broker" 20 test -s "$DIR/port"
    BS=$(cat "$DIR/port")
}

# start_shards N DIM [ARGS...]: shards 0..N-1 of N on free ports (start_shard, ARGS to each); sets
# SHARD_PORTS and SHARD_PIDS (by shard) and SHARDS, their endpoint list for trainers and the
# coordinator. A shard restarts on its port with start_shard I N "${SHARD_PORTS[I]}" DIM ARGS.
start_shards() {
    local n=$1 dim=$2 i
    shift 2
    SHARD_PORTS=() SHARD_PIDS=() SHARDS=""
    for ((i = 0; i < n; i++)); do
        SHARD_PORTS+=("$(free_port)")
        start_shard "$i" "$n" "${SHARD_PORTS[$i]}" "$dim" "$@"
        SHARD_PIDS+=("$SHARD_PID")
        SHARDS+="${SHARDS:+,}tcp://127.0.0.1:${SHARD_PORTS[$i]}"
    done
}

# start_coordinator MODE CHECKPOINT_DIR [ARGS...]: the coordinator of $SHARDS on a free port
# (startup grace 500ms), ARGS last, logging to ${COORD_LOG:-$DIR/coord.log}; sets COORD, its pid,
# and COORD_PORT.
start_coordinator() {
    local mode=$1 ck=$2
    shift 2
    COORD_PORT=$(free_port)
    "$SPARROW" coordinator --listen "tcp://127.0.0.1:$COORD_PORT" --mode "$mode" --shards "$SHARDS" \
        --checkpoint-dir "$ck" --set coordinator.startup.grace=500ms "$@" \
        >"${COORD_LOG:-$DIR/coord.log}" 2>&1 &
    COORD=$!
    PIDS+=("$COORD")
}

# start_serve CHECKPOINT_DIR [ARGS...]: `sparrow serve` of the checkpoints under CHECKPOINT_DIR and
# the update stream at $BS, on a free port, ARGS last, logging to $DIR/serve.log; sets SERVE, its
# pid, and SPORT once its port file is written.
start_serve() {
    local ck=$1
    shift
    rm -f "$DIR/serve.port"
    "$SPARROW" serve --checkpoint-dir "$ck" --brokers "$BS" --port 0 --port-file "$DIR/serve.port" \
        --set serve.log.dir="$DIR" "$@" >"$DIR/serve.log" 2>&1 &
    SERVE=$!
    PIDS+=("$SERVE")
    wait_for "serve's port file" 30 test -s "$DIR/serve.port"
    SPORT=$(cat "$DIR/serve.port")
}

# start_coord_trainer SHARDS COORD_PORT [ARGS...]: an FM trainer (k 4, batch 256, CPU) of group g,
# id ${TRAINER_ID:-1}, reading kafka://$BS/examples under the coordinator at COORD_PORT, ARGS
# last, logging to ${TRAINER_LOG:-$DIR/trainer.log}; sets TR and returns once the trainer has
# partitions.
start_coord_trainer() {
    local shards=$1 cport=$2 log=${TRAINER_LOG:-$DIR/trainer.log}
    shift 2
    "$SPARROW" trainer --in "kafka://$BS/examples" --shards "$shards" --model fm --latent-dim 4 \
        --batch 256 --backend cpu --group g --id "${TRAINER_ID:-1}" --http-port -1 \
        --set trainer.coordinator="tcp://127.0.0.1:$cport" "$@" >"$log" 2>&1 &
    TR=$!
    PIDS+=("$TR")
    wait_for "the trainer's assignment" 30 grep -q "partition assigned" "$log"
}

# start_gen N RATE: `sparrow gen` (seed 4; N 0: unending) producing RATE examples/s to
# kafka://$BS/examples, logging to $DIR/gen.log; sets GEN.
start_gen() {
    "$SPARROW" gen --n "$1" --seed 4 --rate "$2" --out "kafka://$BS/examples" 2>"$DIR/gen.log" &
    GEN=$!
    PIDS+=("$GEN")
}

# check_latest_counter CKPT_COUNTER ROOT KEY N WHAT: the checkpoint LATEST under ROOT counts N
# examples in its manifest and N in the counter row KEY (tests/integration/ckpt_counter.c), exactly;
# fails naming WHAT ("produced", "valid events") otherwise. Prints LATEST's line.
check_latest_counter() {
    local line examples counter
    line=$("$1" "$2" "$3") || fail "reading the counter from LATEST under $2"
    echo "LATEST $line"
    examples=$(echo "$line" | sed -n 's/.*examples=\([0-9]*\).*/\1/p')
    counter=$(echo "$line" | sed -n 's/.*counter=\([0-9.]*\).*/\1/p')
    [ "$examples" = "$4" ] || fail "manifest example count $examples != $4 $5"
    [ "$counter" = "$4.0" ] || fail "counter $counter != $4 $5"
}

# summary_check RUN_DIR [ARGS...] <<'PY' ... PY: runs the Python checks on stdin against a `sparrow
# launch` run, with d (RUN_DIR), s (its summary.json), sys.argv[2:] (ARGS) and want(cond, what),
# which fails the test printing what and the summary.
summary_check() {
    local prelude='import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
def want(cond, what):
    if not cond:
        print("summary.json:", what, json.dumps(s, indent=1)[:3000])
        sys.exit(1)
'
    python3 -c "$prelude$(cat)" "$@" || fail "summary.json"
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
