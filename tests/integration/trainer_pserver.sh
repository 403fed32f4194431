#!/usr/bin/env bash
# `sparrow trainer` against two `sparrow pserver` processes on loopback, on `sparrow gen --n 200000`
# data: FM k=4 learns well below the best constant predictor and toward the Bayes-optimal logloss
# as examples grow (a run on the first 20000 examples is further from Bayes than one on all
# 200000, each against fresh shards). LR learns too. FM with trainer.threads=2 ends where one
# thread does: final-window logloss within 1e-4 (the two differ only by the reassociation of each
# row's gradient sum). Bounds have margin; nothing depends on speed.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

"$SPARROW" gen --n 200000 --seed 5 --out "$DIR/data.pb" 2>"$DIR/gen.log" || fail "gen"

# run NAME MODEL DIM MAX_EXAMPLES [ARGS...]: fresh shards, one trainer run, shards stopped with
# SIGTERM.
run() {
    local name=$1 model=$2 dim=$3 max=$4
    shift 4
    rm -rf "$DIR/shard-0" "$DIR/shard-1"
    local p0 p1 s0 s1
    p0=$(free_port)
    p1=$(free_port)
    start_shard 0 2 "$p0" "$dim" --set pserver.lr=0.02
    s0=$SHARD_PID
    start_shard 1 2 "$p1" "$dim" --set pserver.lr=0.02
    s1=$SHARD_PID
    timeout 120 "$SPARROW" trainer --in "file:$DIR/data.pb" \
        --shards "tcp://127.0.0.1:$p0,tcp://127.0.0.1:$p1" --model "$model" --latent-dim 4 \
        --batch 256 --backend cpu --max-examples "$max" --http-port -1 \
        --set trainer.eval.window=20000 "$@" >"$DIR/$name.log" 2>&1 || fail "$name: trainer exit status"
    kill -TERM "$s0" "$s1"
    wait "$s0" || fail "$name: shard 0 exit status"
    wait "$s1" || fail "$name: shard 1 exit status"
    grep ' finished ' "$DIR/$name.log" | sed 's/^.* finished /'"$name"': /'
}

run fm_early fm 5 20000
run fm fm 5 0
run lr lr 1 0
run fm_t2 fm 5 0 --set trainer.threads=2

for name in fm_early fm lr fm_t2; do
    [ "$(kv status "$DIR/$name.log")" = success ] || fail "$name: status"
    [ "$(kv rejected "$DIR/$name.log")" = 0 ] || fail "$name: rejected"
done
[ "$(kv examples "$DIR/fm_early.log")" = 20000 ] || fail "fm_early: examples"
[ "$(kv examples "$DIR/fm.log")" = 200000 ] || fail "fm: examples"
[ "$(kv examples "$DIR/lr.log")" = 200000 ] || fail "lr: examples"
[ "$(kv examples "$DIR/fm_t2.log")" = 200000 ] || fail "fm_t2: examples"
grep -q ' started .* threads=2 ' "$DIR/fm_t2.log" || fail "fm_t2: not on 2 compute threads"
check "abs($(kv window_logloss "$DIR/fm_t2.log") - $(kv window_logloss "$DIR/fm.log")) <= 1e-4" \
    "fm_t2: 2 threads' window logloss differs from 1 thread's"
for name in fm lr; do
    w=$(kv window_logloss "$DIR/$name.log")
    c=$(kv const_logloss "$DIR/$name.log")
    b=$(kv bayes_logloss "$DIR/$name.log")
    check "$w < $c - 0.01" "$name: window logloss not clearly below the constant predictor's"
    check "$w > $b" "$name: window logloss below Bayes"
done
# toward Bayes as examples grow: the gap at 200000 is clearly smaller than at 20000
ge=$(python3 -c "print($(kv window_logloss "$DIR/fm_early.log") - $(kv bayes_logloss "$DIR/fm_early.log"))")
gf=$(python3 -c "print($(kv window_logloss "$DIR/fm.log") - $(kv bayes_logloss "$DIR/fm.log"))")
echo "gap to Bayes: $ge after 20000 examples, $gf after 200000"
check "$gf < $ge - 0.01" "fm: not approaching Bayes"
echo "trainer_pserver: ok"
