#!/usr/bin/env bash
# A file to a prediction without Kafka (issue 18 §1-§3): `sparrow serve` refuses a checkpoint
# directory that does not exist or holds no checkpoint (unless --allow-empty) and, without brokers,
# serves a checkpoint offline, ready once loaded; `sparrow trainer --checkpoint-dir` writes
# checkpoints that serve, eval and export read, with in-process shards (and continued from LATEST
# by a second run) and with two `sparrow pserver` processes (its own coordinator; a pserver whose
# checkpoint directory differs is a named error); `sparrow export` full and --since, its row set
# checked against serve's rows and against two full exports.
# usage: file_to_serve.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the script works in DIR
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "$0")/cluster_lib.sh"
cd "$DIR"

K=4
DIM=$((1 + K))
# eval_cli's learnable stream, smaller: 8000 to train, 2000 more for a second run, 2000 held out
"$SPARROW" gen --n 12000 --seed 3 --fields 8 --latent-dim "$K" --vocab-max 100 --signal 2 \
    --format json --out all.json 2>gen.log
head -n 8000 all.json >train.json
sed -n 8001,10000p all.json >more.json
tail -n 2000 all.json >held.json
TRAIN=(--format json --model fm --latent-dim "$K" --batch 256 --backend cpu --http-port -1
    --set trainer.checkpoint.interval=0)

# serve_start NAME ARGS...: `sparrow serve` on a free port (NAME.log, NAME.port); sets SPORT.
serve_start() {
    local name=$1
    shift
    rm -f "$name.port"
    "$SPARROW" serve --port 0 --port-file "$name.port" --set serve.log.dir="$DIR" "$@" \
        >"$name.log" 2>&1 &
    SERVE=$!
    PIDS+=("$SERVE")
    wait_for "$name's port file" 30 test -s "$name.port"
    SPORT=$(cat "$name.port")
    wait_for "$name ready" 30 curl -sf "http://127.0.0.1:$SPORT/readyz" -o /dev/null
}
serve_stop() {
    kill "$SERVE" 2>/dev/null || true
    wait "$SERVE" 2>/dev/null || true
}
# predictions PORT FILE: the predictions of FILE's first 20 JSON lines' features, one per line
predictions() {
    python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
lines = open(sys.argv[2]).read().splitlines()[:20]
body = {"examples": [{"features": json.loads(l)["features"]} for l in lines]}
req = urllib.request.Request("http://127.0.0.1:%s/v1/predict" % sys.argv[1],
                             data=json.dumps(body).encode(), method="POST")
for p in json.load(urllib.request.urlopen(req, timeout=20))["predictions"]:
    print(p)
PY
}
expect_fail() { # WHAT PATTERN COMMAND...
    local what=$1 pattern=$2
    shift 2
    if "$@" >fail.out 2>fail.err; then fail "$what: exited 0"; fi
    grep -qF -- "$pattern" fail.err fail.out || fail "$what: '$(tail -3 fail.err)' lacks '$pattern'"
}
# eval_better CKPT WHAT: `sparrow eval` of the held-out file beats the constant predictor
eval_better() {
    "$SPARROW" eval --checkpoint "$1" --in file:held.json --format json --json >eval.json \
        2>eval.log || fail "$2: eval failed: $(tail -3 eval.log)"
    python3 - <<'PY' || fail "$2: eval: $(cat eval.json)"
import json
r = json.load(open("eval.json"))
assert r["examples"] == 2000 and r["logloss"] < r["const_logloss"] - 0.01, r
print("  held-out logloss %.4f, constant %.4f, epoch %d" %
      (r["logloss"], r["const_logloss"], r["epoch"]))
PY
}

echo "1. serve: a missing or empty checkpoint directory is an error; --allow-empty; offline"
expect_fail "missing dir" "serve.checkpoint.dir=$DIR/typo: No such file or directory" \
    timeout 20 "$SPARROW" serve --checkpoint-dir "$DIR/typo" --port 0
mkdir -p empty/checkpoints
expect_fail "empty dir" "serve.checkpoint.dir=empty holds no checkpoint" \
    timeout 20 "$SPARROW" serve --checkpoint-dir empty --port 0
expect_fail "nothing to serve" "nothing to serve" timeout 20 "$SPARROW" serve --port 0
serve_start empty --checkpoint-dir empty --allow-empty
grep -q "offline: serving the checkpoint only, ready" empty.log || fail "empty: not offline"
[ "$(predictions "$SPORT" held.json | sort -u)" = 0.5 ] || fail "an empty model predicts 0.5"
serve_stop

echo "2. trainer, in-process shards -> checkpoint -> serve (offline), eval"
"$SPARROW" trainer --in file:train.json --shards inproc:2 --checkpoint-dir ck1 "${TRAIN[@]}" \
    >trainer1.log 2>&1 || fail "trainer 1 failed"
grep -q "checkpoint completed epoch=1 trigger=final examples=8000 " trainer1.log ||
    fail "trainer 1: no final checkpoint of 8000 examples"
eval_better ck1 "in-process"
serve_start serve1 --checkpoint-dir ck1
predictions "$SPORT" held.json >pred1.txt
check "len(set(open('pred1.txt').read().split()) - {'0.5'}) == 20" \
    "every prediction from the trained checkpoint differs from 0.5"

echo "3. export: full (tsv, npy) against serve's rows"
"$SPARROW" export --checkpoint ck1 --to ex1 >export1.out || fail "export tsv"
"$SPARROW" export --checkpoint ck1/checkpoints --to ex1npy --format npy >export1npy.out ||
    fail "export npy"
python3 - "$SPORT" "$DIM" <<'PY' || fail "export rows differ from serve's"
import json, sys, urllib.request
port, dim = sys.argv[1], int(sys.argv[2])
meta = json.load(open("ex1/metadata.json"))
assert meta["model"] == "fm" and meta["dim"] == dim and meta["epoch"] == 1, meta
assert meta["example_count"] == 8000 and meta["since_epoch"] is None, meta
rows = {}
for line in open("ex1/rows.tsv"):
    cols = line.split("\t")
    rows[int(cols[0])] = [float(x) for x in cols[1:]]
assert len(rows) == meta["rows"] > 100 and 0 in rows, len(rows)
keys = sorted(rows)
assert [int(l.split("\t")[0]) for l in open("ex1/rows.tsv")] == keys  # ascending
# serve loaded the same checkpoint: the same row set, and the same weights for every key
metrics = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=20).read()
held = [l for l in metrics.decode().splitlines() if l.startswith("sparrow_serve_rows ")]
assert int(float(held[0].split()[1])) == len(rows), (held, len(rows))
for k in keys:
    r = json.load(urllib.request.urlopen("http://127.0.0.1:%s/v1/rows/%d" % (port, k), timeout=20))
    assert r["weights"] == rows[k], (k, r["weights"], rows[k])
# npy: the same rows, bit for bit (the tsv's %.9g round-trips a float32)
import struct
def npy(path):
    b = open(path, "rb").read()
    assert b[:6] == b"\x93NUMPY" and len(b) >= 128
    return b[128:], b[10:128].decode()
kb, kh = npy("ex1npy/keys.npy")
wb, wh = npy("ex1npy/weights.npy")
assert "'<u8'" in kh and "(%d,)" % len(rows) in kh, kh
assert "'<f4'" in wh and "(%d, %d)" % (len(rows), dim) in wh, wh
nk = list(struct.unpack("<%dQ" % len(rows), kb))
nw = struct.unpack("<%df" % (len(rows) * dim), wb)
assert nk == keys
for i, k in enumerate(keys):
    assert list(nw[i * dim:(i + 1) * dim]) == [struct.unpack("<f", struct.pack("<f", x))[0]
                                               for x in rows[k]], k
print("  %d rows: serve's rows, tsv and npy agree" % len(rows))
PY
serve_stop

echo "4. a second run continues from LATEST; export --since against two full exports"
"$SPARROW" trainer --in file:more.json --shards inproc:2 --checkpoint-dir ck1 "${TRAIN[@]}" \
    >trainer2.log 2>&1 || fail "trainer 2 failed"
grep -q "checkpoint completed epoch=2 trigger=final examples=10000 " trainer2.log ||
    fail "trainer 2: epoch 2 does not count 8000 + 2000 examples"
"$SPARROW" export --checkpoint ck1 --to ex2 >/dev/null || fail "export epoch 2"
"$SPARROW" export --checkpoint ck1 --epoch 2 --since 1 --to since >since.out || fail "--since"
"$SPARROW" export --checkpoint ck1 --epoch 2 --since 1 --to since-npy --format npy >/dev/null ||
    fail "--since npy"
python3 - <<'PY' || fail "--since rows"
import json, struct
def tsv(path):
    return {int(l.split("\t")[0]): l.split("\t", 1)[1] for l in open(path)}
one, two, since = tsv("ex1/rows.tsv"), tsv("ex2/rows.tsv"), tsv("since/rows.tsv")
want = {k: w for k, w in two.items() if one.get(k) != w}
assert since == want, (len(since), len(want))
removed = [int(l) for l in open("since/removed.tsv")]
assert removed == sorted(set(one) - set(two)), removed
meta = json.load(open("since/metadata.json"))
assert meta["since_epoch"] == 1 and meta["epoch"] == 2, meta
assert meta["rows"] == len(want) and meta["unchanged"] == len(two) - len(want), meta
b = open("since-npy/keys.npy", "rb").read()[128:]
assert list(struct.unpack("<%dQ" % len(want), b)) == sorted(want)
print("  since epoch 1: %d of %d rows changed or new, %d unchanged, %d removed" %
      (len(want), len(two), meta["unchanged"], len(removed)))
PY
expect_fail "--since not older" "older epoch" \
    "$SPARROW" export --checkpoint ck1 --epoch 1 --since 2 --to bad
expect_fail "export of a missing epoch" "epoch 7 not found" \
    "$SPARROW" export --checkpoint ck1 --epoch 7 --to bad
[ ! -e bad ] || fail "a failed export left its directory"

echo "5. trainer + 2 pserver processes (the trainer's own coordinator)"
start_shards 2 "$DIM" --set pserver.checkpoint.dir="$DIR/ck2"
# a checkpoint directory the shards do not write into: the error names the setting
expect_fail "shards elsewhere" "pserver.checkpoint.dir=$DIR/ck3" \
    timeout 120 "$SPARROW" trainer --in file:train.json --shards "$SHARDS" \
    --checkpoint-dir "$DIR/ck3" "${TRAIN[@]}"
timeout 120 "$SPARROW" trainer --in file:train.json --shards "$SHARDS" --checkpoint-dir "$DIR/ck2" \
    "${TRAIN[@]}" >trainer3.log 2>&1 || fail "trainer 3 (pservers) failed"
grep -q "final checkpoint completed" trainer3.log || fail "trainer 3: no final checkpoint"
grep -q "finished trainer removed without recovery" trainer3.log ||
    fail "trainer 3: its Leave rolled the shards back"
eval_better ck2 "pservers"
serve_start serve2 --checkpoint-dir ck2
predictions "$SPORT" held.json >pred2.txt
check "len(set(open('pred2.txt').read().split()) - {'0.5'}) == 20" \
    "every prediction from the pservers' checkpoint differs from 0.5"
serve_stop
echo "file_to_serve: all checks passed"
