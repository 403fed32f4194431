#!/usr/bin/env bash
# The trainer's PS client against two `sparrow pserver` processes: pipelined pulls and windowed
# pushes of known gradients, every row checked exactly; then shard 1 is killed with -9 while the
# client keeps pushing. The client must wait and say so ("waiting for shard"), not crash or spin,
# and once shard 1 is back on the same endpoint (restarted empty, no checkpoint) it must deliver
# every outstanding push exactly once: shard 0 holds both phases, shard 1 the second one. The
# window (8) fills and bounds the pushes in flight meanwhile.
set -euo pipefail
SPARROW=$1
DIR=$2
DRIVER=$3
DIM=4
STEPS=20
rm -rf "$DIR"
mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"



# start_shard I PORT: runs shard I in the background; sets SHARD_PID.
start_shard() {
    "$SPARROW" pserver --listen "tcp://127.0.0.1:$2" --shard "$1" --shards 2 --dim $DIM \
        --optimizer sgd --data-dir "$DIR/shard-$1" --http-port 0 --memory-mb 16 \
        --set pserver.lr=1 --set pserver.init.scale=0 --set pserver.staleness.penalty=none \
        >>"$DIR/shard-$1.log" 2>&1 &
    SHARD_PID=$!
    PIDS+=("$SHARD_PID")
}

# wait_driver WHAT CMD...: polls CMD for up to 60 s while the driver runs.
wait_driver() {
    local what=$1
    shift
    for _ in $(seq 1 600); do
        if "$@"; then
            return 0
        fi
        kill -0 "$DRIVER_PID" 2>/dev/null || fail "driver exited while waiting for $what"
        sleep 0.1
    done
    fail "timed out waiting for $what"
}

PORT0=$(free_port)
PORT1=$(free_port)
start_shard 0 "$PORT0"
PID0=$SHARD_PID
start_shard 1 "$PORT1"
PID1=$SHARD_PID

# The client waits for shards that are not up yet, so no readiness probe is needed.
"$DRIVER" "tcp://127.0.0.1:$PORT0,tcp://127.0.0.1:$PORT1" $DIM "$DIR" $STEPS 1 \
    >"$DIR/driver.log" 2>&1 &
DRIVER_PID=$!
PIDS+=("$DRIVER_PID")

wait_driver "phase 1" test -e "$DIR/phase1"
kill -9 "$PID1"
wait "$PID1" 2>/dev/null || true
touch "$DIR/go"
wait_driver "the client to report the dead shard" grep -q "waiting for shard shard=1" "$DIR/driver.log"
# The client is blocked on shard 1: it must be sleeping, not spinning.
ticks0=$(awk '{print $14 + $15}' "/proc/$DRIVER_PID/stat")
sleep 1
ticks1=$(awk '{print $14 + $15}' "/proc/$DRIVER_PID/stat")
hz=$(getconf CLK_TCK)
if [ $((ticks1 - ticks0)) -gt $((hz / 2)) ]; then
    fail "driver used $((ticks1 - ticks0)) ticks of CPU in 1 s while waiting"
fi
start_shard 1 "$PORT1"
PID1=$SHARD_PID

rc=0
wait "$DRIVER_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "driver exited with $rc"
grep -q "phase 2 ok" "$DIR/driver.log" || fail "phase 2 not reported"
grep -q "shard is back shard=1" "$DIR/driver.log" || fail "recovery not reported"
grep -q "reconnects=[1-9]" "$DIR/driver.log" || fail "no reconnect counted"
grep -q "window_max=8$" "$DIR/driver.log" || fail "the push window did not fill to its bound (8)"

# Shards stop cleanly on SIGTERM.
kill -TERM "$PID0" "$PID1"
wait "$PID0" || fail "shard 0 exit status"
wait "$PID1" || fail "shard 1 exit status"
grep "phase 2 ok" "$DIR/driver.log"
echo "psc_shard_restart: ok"
