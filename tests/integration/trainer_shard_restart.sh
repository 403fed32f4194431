#!/usr/bin/env bash
# A shard killed with -9 and restarted mid-run does not crash the trainer: it waits and says so
# ("waiting for shard"), resends on a fresh connection once the shard is back on the same
# endpoint (restarted empty: no checkpoint), and the run completes with every example trained and
# a model still clearly better than the constant predictor.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

"$SPARROW" gen --n 200000 --seed 6 --out "$DIR/data.pb" 2>"$DIR/gen.log" || fail "gen"
P0=$(free_port)
P1=$(free_port)
start_shard 0 2 "$P0" 5 --set pserver.lr=0.02
S0=$SHARD_PID
start_shard 1 2 "$P1" 5 --set pserver.lr=0.02
S1=$SHARD_PID

# Slowed down (straggler delay) so that the kill lands mid-run whatever the machine's speed.
"$SPARROW" trainer --in "file:$DIR/data.pb" --shards "tcp://127.0.0.1:$P0,tcp://127.0.0.1:$P1" \
    --model fm --latent-dim 4 --batch 256 --backend cpu --http-port -1 \
    --set trainer.debug.delay_ms=10 --set trainer.log.interval=200ms \
    --set trainer.push.timeout=300ms --set trainer.pull.timeout=300ms \
    --set trainer.eval.window=20000 >"$DIR/trainer.log" 2>&1 &
TR=$!
PIDS+=("$TR")

progressed() { # EXAMPLES: a progress line with at least that many examples
    kill -0 "$TR" 2>/dev/null || fail "trainer exited early"
    grep ' progress ' "$DIR/trainer.log" | grep -o 'examples=[0-9]*' | cut -d= -f2 |
        awk -v n="$1" '$1 >= n {found = 1} END {exit !found}'
}
wait_for "the trainer to train 20000 examples" 60 progressed 20000
kill -9 "$S1"
wait "$S1" 2>/dev/null || true
wait_for "the trainer to report the dead shard" 30 grep -q "waiting for shard.*shard=1" \
    "$DIR/trainer.log"
kill -0 "$TR" 2>/dev/null || fail "trainer exited while shard 1 was down"
sleep 0.5
start_shard 1 2 "$P1" 5 --set pserver.lr=0.02
S1=$SHARD_PID

rc=0
timeout 120 tail --pid="$TR" -f /dev/null || true
wait "$TR" || rc=$?
[ "$rc" -eq 0 ] || fail "trainer exit status $rc"
grep ' finished ' "$DIR/trainer.log" | sed 's/^.* finished /finished: /'
[ "$(kv status "$DIR/trainer.log")" = success ] || fail "status"
[ "$(kv examples "$DIR/trainer.log")" = 200000 ] || fail "examples"
grep -q "shard is back.*shard=1" "$DIR/trainer.log" || fail "recovery not reported"
w=$(kv window_logloss "$DIR/trainer.log")
c=$(kv const_logloss "$DIR/trainer.log")
check "$w < $c - 0.005" "window logloss not below the constant predictor's after the restart"
kill -TERM "$S0" "$S1"
wait "$S0" || fail "shard 0 exit status"
wait "$S1" || fail "shard 1 exit status"
echo "trainer_shard_restart: ok"
