#!/usr/bin/env bash
# `sparrow eval` end to end: an FM trained by a file-input trainer against one shard, checkpointed
# (the shard's own checkpoint, completed with a MANIFEST and LATEST like the coordinator's), then
# scored on a held-out tail of the same generated stream that no trainer read.
# usage: eval_cli.sh PATH_TO_SPARROW SCRATCH_DIR PSERVER_CLIENT EVAL_MANIFEST
set -euo pipefail
SPARROW=$1
DIR=$2
CLIENT=$3
MANIFEST=$4
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "$0")/cluster_lib.sh"

K=4
DIM=$((1 + K))
# A learnable stream (small vocabularies, strong planted FM; the trainer's progressive logloss
# ends near 0.43 against a constant's 0.51 at these settings): 40000 JSON lines, the first
# 32000 trained on, the last 8000 held out.
"$SPARROW" gen --n 40000 --seed 3 --fields 8 --latent-dim "$K" --vocab-max 100 --signal 2 \
    --format json --out "$DIR/all.json" 2>"$DIR/gen.log"
head -n 32000 "$DIR/all.json" >"$DIR/train.json"
tail -n 8000 "$DIR/all.json" >"$DIR/held.json"
"$SPARROW" gen --n 300 --seed 4 --fields 8 --format pb --out "$DIR/small.pb" 2>>"$DIR/gen.log"

port=$(free_port)
EP="tcp://127.0.0.1:$port"
CK="$DIR/ck"
start_shard 0 1 "$port" "$DIM" --set pserver.checkpoint.dir="$CK"
"$SPARROW" trainer --in "file:$DIR/train.json" --format json --shards "$EP" --model fm \
    --latent-dim "$K" --batch 256 >"$DIR/trainer.log" 2>&1 || fail "the trainer failed"
[ "$(kv examples "$DIR/trainer.log")" = 32000 ] || fail "the trainer did not train 32000 examples"

# Epoch 3: the shard writes checkpoints/3/shard-0; eval_manifest writes the MANIFEST and LATEST.
"$CLIENT" "$EP" "$DIM" checkpoint 3 >"$DIR/ckpt.out" || fail "checkpoint request: $(cat "$DIR/ckpt.out")"
"$MANIFEST" "$CK" 3 1 >"$DIR/manifest.out" || fail "eval_manifest failed"
kill "$SHARD_PID" 2>/dev/null || true
wait "$SHARD_PID" 2>/dev/null || true

# --json: one object with exactly the documented keys; the count is exact, the model learnt.
"$SPARROW" eval --checkpoint "$CK" --in "file:$DIR/held.json" --format json --json \
    >"$DIR/eval.json" 2>"$DIR/eval.log" || fail "eval failed: $(cat "$DIR/eval.log")"
python3 - "$DIR/eval.json" "$DIM" <<'EOF' || fail "eval --json: $(cat "$DIR/eval.json")"
import json, math, sys
r = json.load(open(sys.argv[1]))
want = {"examples", "rejected", "logloss", "auc", "mean_prediction", "click_rate", "calibration",
        "const_logloss", "bayes_logloss", "bayes_auc", "epoch", "model", "dim"}
assert set(r) == want, sorted(set(r) ^ want)
assert r["examples"] == 8000 and r["rejected"] == 0, r
assert r["epoch"] == 3 and r["model"] == "fm" and r["dim"] == int(sys.argv[2]), r
assert math.isfinite(r["logloss"]) and r["logloss"] < r["const_logloss"], r
assert r["bayes_logloss"] is not None and r["bayes_logloss"] < r["logloss"], r
assert 0.5 < r["auc"] <= r["bayes_auc"] + 0.02, r
assert abs(r["calibration"] - r["mean_prediction"] / r["click_rate"]) < 1e-12, r
print("eval_cli: held-out logloss %.4f (constant %.4f, Bayes %.4f), AUC %.4f (Bayes %.4f)" %
      (r["logloss"], r["const_logloss"], r["bayes_logloss"], r["auc"], r["bayes_auc"]))
EOF

# The checkpoints/ directory itself is accepted, with an explicit epoch; human-readable output.
"$SPARROW" eval --checkpoint "$CK/checkpoints" --epoch 3 --in "file:$DIR/held.json" \
    --format json >"$DIR/eval.txt" 2>"$DIR/eval.log" || fail "eval of checkpoints/ failed"
grep -Eq '^examples +8000$' "$DIR/eval.txt" || fail "text output: $(cat "$DIR/eval.txt")"
grep -Eq '^epoch +3 ' "$DIR/eval.txt" || fail "text output lacks the epoch"

# Errors: non-zero exit and a message naming the cause.
expect_fail() { # WHAT PATTERN ARGS...
    local what=$1 pattern=$2
    shift 2
    if "$SPARROW" eval "$@" >"$DIR/out" 2>"$DIR/err"; then fail "$what: exited 0"; fi
    grep -qi -- "$pattern" "$DIR/err" || fail "$what: message '$(cat "$DIR/err")' lacks '$pattern'"
}
expect_fail "missing epoch" "epoch 9 not found" \
    --checkpoint "$CK" --epoch 9 --in "file:$DIR/held.json" --format json
grep -q "epochs present: 3" "$DIR/err" || fail "missing epoch: present epochs not listed"
expect_fail "json on a pb file" "wrong --format" \
    --checkpoint "$CK" --in "file:$DIR/small.pb" --format json
expect_fail "missing checkpoint dir" "No such file" \
    --checkpoint "$DIR/nowhere" --in "file:$DIR/held.json" --format json
mkdir -p "$DIR/empty/checkpoints"
expect_fail "no LATEST" "LATEST" --checkpoint "$DIR/empty" --in "file:$DIR/held.json" --format json
expect_fail "missing file" "held-nope" --checkpoint "$CK" --in "file:$DIR/held-nope.json"
expect_fail "unknown format" "pb|json|criteo" --checkpoint "$CK" --in "file:$DIR/held.json" \
    --format xml
expect_fail "no source" "exactly one" --in "file:$DIR/held.json"
# a corrupt manifest (one byte flipped) is refused
cp -r "$CK" "$DIR/ck-bad"
python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xff; open(p,'wb').write(b)" \
    "$DIR/ck-bad/checkpoints/3/MANIFEST"
expect_fail "corrupt manifest" "MANIFEST" --checkpoint "$DIR/ck-bad" --in "file:$DIR/held.json" \
    --format json
# live shards: none listening on a fresh port
expect_fail "shards unreachable" "unreachable" --shards "tcp://127.0.0.1:$(free_port)" \
    --model fm --latent-dim "$K" --in "file:$DIR/held.json" --format json --timeout 500ms

# Live shards: the shard restarted from the checkpoint scores like the checkpoint on the keys
# it holds; unseen keys differ (initial rows, +-0.01, against zeros), so compare to 0.01.
start_shard 0 1 "$port" "$DIM" --set pserver.checkpoint.dir="$CK" --set pserver.restore=true
"$SPARROW" eval --shards "$EP" --model fm --latent-dim "$K" --in "file:$DIR/held.json" \
    --format json --json >"$DIR/eval-live.json" 2>"$DIR/eval-live.log" ||
    fail "eval --shards failed: $(cat "$DIR/eval-live.log")"
python3 - "$DIR/eval.json" "$DIR/eval-live.json" <<'EOF' || fail "eval --shards: $(cat "$DIR/eval-live.json")"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert b["examples"] == 8000 and b["epoch"] is None and b["model"] == "fm", b
assert abs(a["logloss"] - b["logloss"]) < 0.01, (a["logloss"], b["logloss"])
EOF
echo "eval_cli: all checks passed"
