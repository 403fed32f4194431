#!/usr/bin/env bash
# A deep model from training to a prediction (issue 19 §4): `sparrow trainer` trains DeepFM and
# DCN-v2 with in-process shards into a checkpoint; `sparrow eval` scores it (better than the
# constant predictor) given the model, and refuses it without the model or with another network
# (more or fewer dense blocks than the checkpoint's); `sparrow serve` bootstraps from it, scores the
# held-out examples with eval's logloss, reports the dense weights it serves (dense_version,
# sparrow_serve_dense_swaps_total), and refuses to start with another network; `sparrow export`
# writes the network's weights (tsv and npy) from which the Python client's Export.predict gives
# serve's predictions, and refuses another network; a trainer continuing the checkpoint with
# another network is refused, with the same one it continues, and an incremental export of the
# new epoch carries the whole network.
# usage: deep_serve.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the script works in DIR
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "$0")/cluster_lib.sh"
CLIENT=$(cd "$(dirname "$0")/../../clients/python" && pwd)
cd "$DIR"

K=4
"$SPARROW" gen --n 14000 --seed 5 --fields 8 --latent-dim "$K" --vocab-max 100 --signal 2 \
    --set gen.model=deep --format json --out all.json 2>gen.log
head -n 12000 all.json >train.json
tail -n 2000 all.json >held.json
FIELDS=C1,C2,C3,C4,C5,C6,C7,C8

serve_start() { # NAME ARGS...: sets SERVE, SPORT
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
expect_fail() { # WHAT PATTERN COMMAND...
    local what=$1 pattern=$2
    shift 2
    if "$@" >fail.out 2>fail.err; then fail "$what: exited 0"; fi
    grep -qF -- "$pattern" fail.err fail.out || fail "$what: '$(tail -3 fail.err)' lacks '$pattern'"
}

for MODEL in deepfm dcnv2; do
    echo "== $MODEL"
    M=(--set trainer.model=$MODEL --set trainer.fields=$FIELDS --set trainer.mlp=16,8
        --set trainer.latent_dim=$K)
    "$SPARROW" trainer --in file:train.json --format json --shards inproc --checkpoint-dir "ck-$MODEL" \
        --batch 256 --backend cpu --http-port -1 --set trainer.checkpoint.interval=0 "${M[@]}" \
        >"train-$MODEL.log" 2>&1 || fail "$MODEL: trainer failed: $(tail -3 "train-$MODEL.log")"

    echo "1. eval with the model beats the constant predictor"
    "$SPARROW" eval --checkpoint "ck-$MODEL" --in file:held.json --format json --json "${M[@]}" \
        >eval.json 2>eval.log || fail "$MODEL: eval failed: $(tail -3 eval.log)"
    python3 - <<'PY' || fail "$MODEL: eval: $(cat eval.json)"
import json
r = json.load(open("eval.json"))
assert r["examples"] == 2000 and r["logloss"] < r["const_logloss"] - 0.01, r
print("  held-out logloss %.4f, constant %.4f, Bayes %.4f" %
      (r["logloss"], r["const_logloss"], r["bayes_logloss"]))
PY

    echo "2. eval refuses the checkpoint without its model, or with another network"
    expect_fail "$MODEL: eval without the model" "holds a deep model's dense blocks" \
        "$SPARROW" eval --checkpoint "ck-$MODEL" --in file:held.json --format json \
        --set trainer.latent_dim=$K
    expect_fail "$MODEL: eval with a smaller network" "dense blocks, the model" \
        "$SPARROW" eval --checkpoint "ck-$MODEL" --in file:held.json --format json "${M[@]}" \
        --set trainer.mlp=4
    expect_fail "$MODEL: eval with a larger network" "dense blocks, the model" \
        "$SPARROW" eval --checkpoint "ck-$MODEL" --in file:held.json --format json "${M[@]}" \
        --set trainer.mlp=64,32

    echo "3. serve bootstraps from the checkpoint and scores the held-out file as eval does"
    serve_start "serve-$MODEL" --checkpoint-dir "ck-$MODEL" "${M[@]}"
    python3 - "$SPORT" <<'PY' || fail "$MODEL: serve predictions"
import json, math, sys, urllib.request
rows = [json.loads(l) for l in open("held.json")]
preds, versions = [], set()
for i in range(0, len(rows), 100):
    body = {"examples": [{"features": r["features"]} for r in rows[i:i + 100]]}
    req = urllib.request.Request("http://127.0.0.1:%s/v1/predict" % sys.argv[1],
                                 data=json.dumps(body).encode(), method="POST")
    r = json.load(urllib.request.urlopen(req, timeout=20))
    preds += r["predictions"]
    versions.add(r["dense_version"])
assert len(preds) == len(rows) and len(versions) == 1, (len(preds), versions)
eps = 1e-7
ll = -sum(math.log(max(p, eps)) if r["label"] else math.log(max(1 - p, eps))
          for p, r in zip(preds, rows)) / len(rows)
want = json.load(open("eval.json"))["logloss"]
assert abs(ll - want) < 1e-4, ("serve's held-out logloss differs from eval's", ll, want)
json.dump(preds, open("serve-preds.json", "w"))
print("  serve's held-out logloss %.6f, eval's %.6f, dense_version %d" % (ll, want, versions.pop()))
PY
    curl -sf "http://127.0.0.1:$SPORT/metrics" >metrics.txt
    grep -q '^sparrow_serve_dense_swaps_total 1$' metrics.txt ||
        fail "$MODEL: $(grep dense metrics.txt)"
    kill "$SERVE" && wait "$SERVE" 2>/dev/null || true

    echo "4. serve refuses another network"
    expect_fail "$MODEL: serve with a larger network" "no complete set of the deep model's" \
        timeout 30 "$SPARROW" serve --checkpoint-dir "ck-$MODEL" --port 0 "${M[@]}" \
        --set trainer.mlp=64,32
    expect_fail "$MODEL: serve with a smaller network" "more dense blocks than the deep model's" \
        timeout 30 "$SPARROW" serve --checkpoint-dir "ck-$MODEL" --port 0 "${M[@]}" \
        --set trainer.mlp=4

    echo "5. export writes the network: the export alone gives serve's predictions"
    rm -rf "ex-$MODEL" "ex-$MODEL-tsv"
    "$SPARROW" export --checkpoint "ck-$MODEL" --to "ex-$MODEL" --format npy "${M[@]}" \
        >export.out 2>export.err || fail "$MODEL: export: $(cat export.err)"
    grep -q "dense network: [0-9]* weights" export.out || fail "$MODEL: export: $(cat export.out)"
    "$SPARROW" export --checkpoint "ck-$MODEL" --to "ex-$MODEL-tsv" "${M[@]}" >/dev/null 2>&1 ||
        fail "$MODEL: export tsv"
    PYTHONPATH="$CLIENT" python3 - "$MODEL" <<'PY' || fail "$MODEL: export's predictions"
import array, json, sys
from sparrow_client.export import read_export
model = sys.argv[1]
rows = [json.loads(l) for l in open("held.json")][:300]
want = json.load(open("serve-preds.json"))[:300]
npy, tsv = read_export("ex-" + model), read_export("ex-" + model + "-tsv", use_numpy=False)
for e in (npy, tsv):
    m = e.metadata
    assert m["model"] == model and m["dense"]["params"] == len(e.dense), m
    assert all(not k >= 0xFFFFFFFFFF000000 for k in map(int, e.keys)), "a dense block as a row"
    assert [l["kind"] for l in m["dense"]["layers"]][-1] == "output", m["dense"]
    worst = max(abs(e.predict(r) - p) for r, p in zip(rows, want))
    assert worst < 1e-5, ("the export's predictions differ from serve's", worst)
# %.9g gives the float32 back bit for bit
assert array.array("f", tsv.dense) == array.array("f", map(float, npy.dense)), "tsv and npy differ"
print("  %d dense weights, %d layers; the export's predictions are serve's (max diff %.1e)" %
      (len(npy.dense), len(npy.metadata["dense"]["layers"]), worst))
PY
    expect_fail "$MODEL: export without the model" "holds a deep model's dense blocks" \
        "$SPARROW" export --checkpoint "ck-$MODEL" --to bad --set trainer.latent_dim=$K
    expect_fail "$MODEL: export with a smaller network" "are not the model's" \
        "$SPARROW" export --checkpoint "ck-$MODEL" --to bad "${M[@]}" --set trainer.mlp=4
    expect_fail "$MODEL: export with a larger network" "dense blocks, the model" \
        "$SPARROW" export --checkpoint "ck-$MODEL" --to bad "${M[@]}" --set trainer.mlp=64,32
    [ ! -e bad ] || fail "$MODEL: a refused export left its directory"

    echo "6. a trainer continuing the checkpoint with another network is refused"
    for mlp in 64,32 4; do
        expect_fail "$MODEL: trainer with trainer.mlp=$mlp" "dense blocks of another network" \
            "$SPARROW" trainer --in file:held.json --format json --shards inproc \
            --checkpoint-dir "ck-$MODEL" --batch 256 --backend cpu --http-port -1 \
            --set trainer.checkpoint.interval=0 "${M[@]}" --set trainer.mlp=$mlp
    done
    "$SPARROW" trainer --in file:held.json --format json --shards inproc --checkpoint-dir "ck-$MODEL" \
        --batch 256 --backend cpu --http-port -1 --set trainer.checkpoint.interval=0 "${M[@]}" \
        >"again-$MODEL.log" 2>&1 || fail "$MODEL: the same network did not continue: $(tail -3 "again-$MODEL.log")"

    echo "7. an incremental export of the new epoch carries the whole, new network"
    rm -rf "since-$MODEL"
    "$SPARROW" export --checkpoint "ck-$MODEL" --since 1 --to "since-$MODEL" --format npy "${M[@]}" \
        >/dev/null 2>export.err || fail "$MODEL: export --since: $(cat export.err)"
    PYTHONPATH="$CLIENT" python3 - "$MODEL" <<'PY' || fail "$MODEL: incremental export's network"
import sys
from sparrow_client.export import read_export
model = sys.argv[1]
full, since = read_export("ex-" + model), read_export("since-" + model)
assert since.metadata["epoch"] == 2 and since.metadata["since_epoch"] == 1, since.metadata
assert len(since.dense) == len(full.dense) and list(since.dense) != list(full.dense), \
    "the incremental export's network is not epoch 2's"
assert all(not int(k) >= 0xFFFFFFFFFF000000 for k in since.keys), "a dense block as a row"
PY
done
echo "deep_serve: ok"
