#!/usr/bin/env bash
# `sync` is synchronous training (two-phase steps): K trainers of batch B end with rows equal,
# within 1e-6 relative, to ONE trainer whose step-t batch is the union of the K trainers' step-t
# batches. Each run is real processes: one `sparrow pserver`, `sparrow coordinator` in sync mode
# and `sparrow trainer`s reading files. A generated stream is dealt out exactly: micro-batch j
# of trainer i holds examples [j*K*B + i*B, j*K*B + (i+1)*B) of the stream, so the reference
# trainer (batch K*B, the whole stream in order) sees the union of the K trainers' micro-batch j
# as its own micro-batch j. The coordinator checkpoints after the last step (checkpoint.steps =
# the run's steps); the rows of both checkpoints are compared key by key (no top-k compression,
# so that both push every row of every step): the same keys, the same versions, and weights
# within 1e-6 relative (normwise over the model; the worst single row is printed too).
# usage: sync_equivalence.sh SPARROW DIR CKPT_COUNTER [CASE...]   CASE = K:MODEL:OPTIMIZER:ACC
set -euo pipefail
SPARROW=$1
DIR=$2
CKPT=$3
shift 3
CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
    for k in 2 4; do
        for model in lr fm; do
            for opt in sgd adagrad; do
                for acc in 1 2; do CASES+=("$k:$model:$opt:$acc"); done
            done
        done
    done
fi
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster_lib.sh"
rm -rf "$DIR" && mkdir -p "$DIR"
B=32
STEPS=6 # steps of each run (micro-batches: STEPS * ACC)
LATENT=4
# Adagrad's epsilon. With the default 1e-8, Adagrad divides each gradient by its own magnitude, so
# float rounding in a near-zero gradient moves a row by up to 1e-4 of its value: ONE trainer
# with the same batches, only the order of the examples inside each batch changed, ends 1.1e-4
# (relative) away from itself (FM, 6 steps, measured). 1e-3 keeps the updates proportional to
# the gradients, so rounding stays at float's own 1e-7 and 1e-6 can be asked.
EPS=1e-3

# One cluster run: run_cluster NAME DIM OPT MODEL BATCH ACC FILES...; the rows of its final
# checkpoint go to $DIR/NAME.rows.
run_cluster() {
    local name=$1 dim=$2 opt=$3 model=$4 batch=$5 acc=$6
    shift 6
    local d="$DIR/$name" rows="$DIR/$name.rows"
    mkdir -p "$d"
    local DIR=$d # the cluster library's processes log under the run's directory
    start_shards 1 "$dim" --optimizer "$opt" --set "pserver.checkpoint.dir=$d" \
        --set pserver.lr=0.05 --set "pserver.eps=$EPS"
    local ps_pid=${SHARD_PIDS[0]}
    # listening before the coordinator binds its own port (free_port once handed out one port
    # twice: the coordinator took it, and the trainers waited for a shard that had exited)
    wait_for "$name: the pserver listening" 30 bash -c \
        "grep -q 'pserver listening' '$d/shard-0.log' || ! kill -0 $ps_pid 2>/dev/null"
    kill -0 "$ps_pid" 2>/dev/null || fail "$name: the pserver exited at start"
    # the first recovery (before any record is read) waits for every trainer, so it is the only
    # one, and every trainer steps from clock 0 together
    start_coordinator sync "$d" --set "coordinator.checkpoint.steps=$STEPS" \
        --set coordinator.checkpoint.interval=0 --set coordinator.startup.grace=10s \
        --set "coordinator.startup.trainers=$#" \
        --set coordinator.member.timeout=30s
    local tpids=() i=0 f
    for f in "$@"; do
        timeout 180 "$SPARROW" trainer --in "file:$f" --format pb --model "$model" --latent-dim "$LATENT" \
            --batch "$batch" --acc-steps "$acc" --topk 1 --http-port -1 \
            --shards "$SHARDS" --set "trainer.coordinator=tcp://127.0.0.1:$COORD_PORT" \
            --set trainer.log.interval=0 >"$d/trainer-$i.log" 2>&1 &
        tpids+=($!)
        PIDS+=($!)
        i=$((i + 1))
    done
    for p in "${tpids[@]}"; do
        wait "$p" || fail "$name: a trainer exited non-zero"
    done
    # the trainers leave after their last step: the checkpoint at step STEPS is LATEST
    grep -q 'checkpoint completed' "$d/coord.log" || fail "$name: no checkpoint completed"
    kill "$COORD" "$ps_pid" 2>/dev/null || true
    wait "$COORD" "$ps_pid" 2>/dev/null || true
    "$CKPT" "$d" --dump >"$rows" || fail "$name: reading the checkpoint"
    local want=$((${#@} * batch * acc * STEPS))
    python3 - "$d" "$want" <<'PY' || fail "$name: the checkpoint does not count every example"
import glob, re, sys
d, want = sys.argv[1], int(sys.argv[2])
log = open(d + "/coord.log").read()
got = [int(x) for x in re.findall(r"checkpoint completed epoch=\d+ examples=(\d+)", log)]
print("  %s: checkpoint examples %s (want %d)" % (d.rsplit("/", 1)[1], got, want))
sys.exit(0 if got and got[-1] == want else 1)
PY
}

for c in "${CASES[@]}"; do
    IFS=: read -r K MODEL OPT ACC <<<"$c"
    if [ "$MODEL" = lr ]; then DIM=1; else DIM=$((1 + LATENT)); fi
    MICRO=$((STEPS * ACC))
    N=$((K * B * MICRO))
    STREAM="$DIR/stream-$K-$ACC.pb"
    [ -f "$STREAM" ] || "$SPARROW" gen --n "$N" --seed 11 --fields 12 --latent-dim 2 \
        --vocab-min 5 --vocab-max 200 --format pb --out "$STREAM" 2>"$DIR/gen.log" ||
        fail "gen"
    python3 - "$HERE" "$STREAM" "$K" "$B" "$DIR/$c" <<'PY' || fail "splitting the stream"
import sys
sys.path.insert(0, sys.argv[1])
import pbwire
recs = pbwire.records(sys.argv[2])
k, b, prefix = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
for i in range(k):
    with open("%s.part-%d.pb" % (prefix, i), "wb") as out:
        for j in range(len(recs) // (k * b)):
            for r in recs[j * k * b + i * b:j * k * b + (i + 1) * b]:
                out.write(pbwire.put_varint(len(r)) + r)
PY
    parts=()
    for i in $(seq 0 $((K - 1))); do parts+=("$DIR/$c.part-$i.pb"); done
    echo "case K=$K model=$MODEL optimizer=$OPT acc_steps=$ACC ($N examples, $STEPS steps)"
    run_cluster "$c.sync" "$DIM" "$OPT" "$MODEL" "$B" "$ACC" "${parts[@]}"
    run_cluster "$c.ref" "$DIM" "$OPT" "$MODEL" $((K * B)) "$ACC" "$STREAM"
    python3 - "$DIR/$c.sync.rows" "$DIR/$c.ref.rows" <<'PY' || fail "$c: rows differ"
import sys
def rows(path):
    out = {}
    for line in open(path):
        f = line.split()
        out[int(f[0])] = (int(f[1]), [float(x) for x in f[2:]])
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if set(a) != set(b):
    print("key sets differ: %d only in sync, %d only in the reference"
          % (len(set(a) - set(b)), len(set(b) - set(a))))
    sys.exit(1)
# relative difference of the two models: ||sync - ref|| / ||ref|| over every weight (a
# normwise measure: an element that is a near-cancellation of larger terms carries their
# absolute rounding, so element-wise ratios of such tiny values say nothing), and the worst row
diff2 = ref2 = row_worst = 0.0
versions = 0
for k in a:
    if a[k][0] != b[k][0]:
        versions += 1
    d2 = sum((x - y) ** 2 for x, y in zip(a[k][1], b[k][1]))
    r2 = sum(y * y for y in b[k][1])
    diff2 += d2
    ref2 += r2
    row_worst = max(row_worst, (d2 / r2) ** 0.5 if r2 > 0 else (0.0 if d2 == 0 else 1.0))
rel = (diff2 / ref2) ** 0.5
print("  %d rows, relative difference %.3g (worst row %.3g), rows whose version differs %d"
      % (len(a), rel, row_worst, versions))
sys.exit(0 if rel <= 1e-6 and versions == 0 else 1)
PY
done
echo "sync_equivalence: ok (${#CASES[@]} cases)"
