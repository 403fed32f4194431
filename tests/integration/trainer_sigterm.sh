#!/usr/bin/env bash
# SIGTERM: a trainer streaming from `sparrow gen --n 0` (endless, through a pipe) against one
# `sparrow pserver`, with top-k 0.1 and error feedback, exports its progressive validation in
# /metrics and reports ready; on SIGTERM it finishes the batch, pushes every residual, waits for
# the acknowledgements and exits 0, and the shard has applied every pushed row.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

P0=$(free_port)
start_shard 0 1 "$P0" 5 --set pserver.lr=0.02
S0=$SHARD_PID
SHARD_HTTP=""
wait_for "the shard's http port" 20 grep -q "http endpoint port=" "$DIR/shard-0.log"
SHARD_HTTP=$(grep -o "http endpoint port=[0-9]*" "$DIR/shard-0.log" | head -1 | cut -d= -f2)

set +o pipefail
"$SPARROW" gen --n 0 --seed 7 --out - 2>"$DIR/gen.log" |
    "$SPARROW" trainer --in file:- --shards "tcp://127.0.0.1:$P0" --model fm --latent-dim 4 \
        --batch 512 --backend cpu --topk 0.1 --http-port 0 --set trainer.http.addr=127.0.0.1 \
        --set trainer.log.interval=500ms --set trainer.eval.window=20000 >"$DIR/trainer.log" 2>&1 &
TR=$!
set -o pipefail
PIDS+=("$TR")
wait_for "the trainer's http port" 20 grep -q "http endpoint port=" "$DIR/trainer.log"
PORT=$(grep -o "http endpoint port=[0-9]*" "$DIR/trainer.log" | head -1 | cut -d= -f2)

trained() { # N: /metrics shows at least N examples trained
    kill -0 "$TR" 2>/dev/null || fail "trainer exited early"
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$DIR/metrics.txt" || return 1
    awk -v n="$1" '$1 == "sparrow_trainer_examples_total" && $2 >= n {f = 1} END {exit !f}' \
        "$DIR/metrics.txt"
}
wait_for "50000 examples in /metrics" 60 trained 50000
# the progress gauges refresh every log interval
sleep 0.7
curl -sf "http://127.0.0.1:$PORT/metrics" >"$DIR/metrics.txt" || fail "/metrics"
for m in sparrow_trainer_window_logloss sparrow_trainer_window_auc \
    sparrow_trainer_bayes_window_logloss sparrow_trainer_push_bytes_per_example \
    sparrow_trainer_compression_ratio sparrow_trainer_residual_rows \
    sparrow_trainer_examples_per_second sparrow_trainer_ps_; do
    grep -q "^$m" "$DIR/metrics.txt" || fail "/metrics lacks $m"
done
ll=$(awk '$1 == "sparrow_trainer_window_logloss" {print $2}' "$DIR/metrics.txt")
ratio=$(awk '$1 == "sparrow_trainer_compression_ratio" {print $2}' "$DIR/metrics.txt")
check "0.3 < $ll < 0.7" "window logloss in /metrics"
check "$ratio > 5" "compression ratio in /metrics"
curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null || fail "/readyz not ready while training"
grep -q ' progress examples=[0-9]* ex_per_s=[0-9]* window_logloss=[0-9.]* window_auc=[0-9.]* bayes_logloss=[0-9.]*.* bytes_per_example=' \
    "$DIR/trainer.log" || fail "no progress line"

kill -TERM "$TR"
rc=0
wait "$TR" || rc=$?
[ "$rc" -eq 0 ] || fail "trainer exit status $rc after SIGTERM"
grep ' finished ' "$DIR/trainer.log" | sed 's/^.* finished /finished: /'
[ "$(kv status "$DIR/trainer.log")" = success ] || fail "status"
flushed=$(kv residual_flushed "$DIR/trainer.log")
pushed=$(kv rows_pushed "$DIR/trainer.log")
check "$flushed > 0" "no residual flushed at SIGTERM"
# every row pushed was acknowledged and applied by the shard
applied() { # the shard's pushed-rows counter (refreshed by its loop) equals $pushed
    curl -sf "http://127.0.0.1:$SHARD_HTTP/metrics" >"$DIR/shard-metrics.txt" || return 1
    APPLIED=$(awk '$1 == "sparrow_ps_rows_total{op=\"push\"}" {print $2}' "$DIR/shard-metrics.txt")
    [ "${APPLIED:-0}" = "$pushed" ]
}
APPLIED=0
wait_for "the shard to count $pushed pushed rows (has ${APPLIED:-0})" 10 applied
echo "rows pushed $pushed (of which residuals flushed at exit $flushed), applied by the shard $APPLIED"
kill -TERM "$S0"
wait "$S0" || fail "shard exit status"
echo "trainer_sigterm: ok"
