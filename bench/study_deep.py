#!/usr/bin/env python3
"""Deep-model study (issue 19): FM, DeepFM and DCN-v2 on the deep planted stream (gen.model=deep)
and on the FM stream, the same DeepFM in PyTorch on the same examples, and DeepFM with K trainers
in the sync and async modes against one trainer.

Part 1, one trainer with an in-process shard (`sparrow trainer --shards inproc`, CPU backend, the
defaults: batch 1024, Adagrad lr 0.05, dense lr 0.005): each model trained one pass over the first
N examples of a stream, its checkpoint scored by `sparrow eval` on the H examples that follow
(held-out logloss and AUC, with the constant predictor's and Bayes's of the same file); the
trainer's examples/s from its finished line (reading its input included).
Part 2, the PyTorch peer (bench/deepfm_torch.py under Debian's python3, python3-torch): the same
DeepFM (fields, k, MLP widths, initialisation, Adagrad with the same rates) on the same examples
(the generator's JSON output of the same seed; the labels are checked equal), one pass, scored on
the same held-out examples; its examples/s is the training loop alone with torch's threads set to
the machine's cores (the input was read and made tensors before its clock starts).
Part 3, `sparrow launch` (2 shards, the coordinator, the Kafka mock, trainers of batch 256) with
DeepFM (k=4, launch's) on the deep stream: K trainers in sync and in async against one trainer of the same batch
(async's baseline) and of batch K x 256 (sync's; with the dense rate at 0.005 and at sqrt(K) times
it, which is what a sync step of K trainers gives the dense network by default,
pserver.sync.dense_lr_scale = sqrt), held-out logloss as part 1. Modes: sync (every row, dense
blocks included, applied once per step from the aggregated pushes), the same with the dense rate
unscaled, sync with trainer.sync.rows=dense (only the bias and the dense blocks wait for the
step's commit; the embedding rows apply as they arrive) and async (everything as it arrives).

Standalone: bench/study_deep.py BUILD_DIR [--quick] [--part models|k] [--json FILE]
(prints JSON unless --json; --part: parts 1-2 or part 3 alone)"""

import json
import math
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report_lib as rl  # noqa: E402
import study_scaling as ss  # noqa: E402  (its stream, launch and eval helpers)

FIELDS = ["I%d" % i for i in range(1, 14)] + ["C%d" % i for i in range(1, 27)]
MODELS = ["fm", "deepfm", "dcnv2"]
# stream tag -> (label, generator properties over the studies' common ones, stationary)
STREAMS = [("deep", "deep planted (gen.model=deep)", {"gen.model": "deep", "gen.drift": 0}),
           ("fm", "FM planted (gen.model=fm)", {"gen.model": "fm", "gen.drift": 0})]
TORCH_PY = "/usr/bin/python3"  # Debian's python3, whose python3-torch it is
# full / quick: part 1-2 examples and held-out; part 3 examples, held-out, partitions, K's, the
# per-run timeout
SIZES = {False: {"n": 1000000, "h": 50000, "kn": 300000, "kh": 20000, "partitions": 64,
                 "ks": [8], "duration": 240},
         True: {"n": 60000, "h": 10000, "kn": 20000, "kh": 10000, "partitions": 8,
                "ks": [4], "duration": 60}}
# (label, mode, penalty, family, trainer settings): sync with every row in its two-phase steps,
# sync with only the dense parameters in them (trainer.sync.rows=dense, Persia's hybrid), async
K_MODES = [("sync", "sync", "inverse", "sync", []),
           ("sync, dense lr unscaled", "sync", "inverse", "sync",
            ["pserver:pserver.sync.dense_lr_scale=none"]),
           ("sync, dense rows only", "sync", "inverse", "sync",
            ["trainer:trainer.sync.rows=dense"]),
           ("async", "async", "none", "async", [])]
DENSE_LR = 0.005  # pserver.lr.dense's default


def model_sets(model):
    if model == "fm":
        return ["trainer.model=fm"]
    return ["trainer.model=%s" % model, "trainer.fields=" + ",".join(FIELDS)]


def records(data):
    return ss._records(data)


def make_streams(rec, sparrow, work, tag, over, n, h):
    """train.pb, heldout.pb, train.jsonl, heldout.jsonl of one stream; the gen stats of all."""
    st = ss._stream(over)
    base = os.path.join(work, "deep-%s" % tag)
    allpb, alljs = base + "-all.pb", base + "-all.jsonl"
    rc, out, _ = rec.run(ss.gen_argv(sparrow, n + h, allpb, st), 600, base + "-gen.log",
                         what="deep study: stream %s, N+H examples" % tag)
    if rc != 0:
        raise RuntimeError("sparrow gen failed (rc=%s): %s" % (rc, out[-300:]))
    argv = ss.gen_argv(sparrow, n + h, alljs, st)
    argv[argv.index("pb")] = "json"
    rc, _, _ = rec.run(argv, 600, base + "-gen-json.log",
                       what="deep study: stream %s as JSON (the PyTorch peer's input)" % tag)
    if rc != 0:
        raise RuntimeError("sparrow gen --format json failed (rc=%s)" % rc)
    with open(allpb, "rb") as f:
        data = f.read()
    offs = records(data)
    if len(offs) - 1 != n + h:
        raise RuntimeError("%s holds %d records, want %d" % (allpb, len(offs) - 1, n + h))
    paths = {"train": base + "-train.pb", "heldout": base + "-heldout.pb",
             "train_json": base + "-train.jsonl", "heldout_json": base + "-heldout.jsonl"}
    with open(paths["train"], "wb") as f:
        f.write(data[:offs[n]])
    with open(paths["heldout"], "wb") as f:
        f.write(data[offs[n]:])
    del data
    clicks = [0, 0]
    with open(alljs) as f, open(paths["train_json"], "w") as tr, \
            open(paths["heldout_json"], "w") as ho:
        for i, line in enumerate(f):
            (tr if i < n else ho).write(line)
            clicks[i >= n] += json.loads(line)["label"]
    os.unlink(allpb)
    os.unlink(alljs)
    return paths, ss._gen_stats(out), clicks


def eval_file(rec, sparrow, ckpt, heldout, model, log):
    argv = [sparrow, "eval", "--checkpoint", ckpt, "--in", "file:" + heldout, "--format", "pb",
            "--json"]
    for s in model_sets(model):
        argv += ["--set", s]
    rc, out, _ = rec.run(argv, 300, log, what="deep study: sparrow eval of %s" % model)
    if rc != 0:
        return None, "sparrow eval failed (rc=%s): %s" % (rc, out.strip()[-300:])
    for ln in reversed(out.strip().splitlines()):
        if ln.strip().startswith("{"):
            return json.loads(ln), None
    return None, "no JSON object in sparrow eval's output"


def one_trainer(rec, sparrow, work, paths, tag, model):
    ckpt = os.path.join(work, "deep-%s-%s-ckpt" % (tag, model))
    shutil.rmtree(ckpt, ignore_errors=True)
    log = os.path.join(work, "deep-%s-%s.log" % (tag, model))
    argv = [sparrow, "trainer", "--in", "file:" + paths["train"], "--format", "pb",
            "--shards", "inproc", "--backend", "cpu", "--http-port", "-1",
            "--set", "trainer.log.interval=0", "--set", "trainer.checkpoint.dir=" + ckpt]
    for s in model_sets(model):
        argv += ["--set", s]
    rc, out, secs = rec.run(argv, 1200, log, what="deep study: %s on stream %s" % (model, tag))
    row = {"stream": tag, "model": model, "rc": rc, "wall_s": round(secs, 1)}
    fin = rl.finished(out)
    row["ex_per_s"] = rl.num(fin.get("ex_per_s")) if fin else None
    row["examples"] = rl.num(fin.get("examples")) if fin else None
    if rc != 0 or not fin:
        row["why"] = "sparrow trainer failed (rc=%s): %s" % (rc, out.strip()[-300:])
        return row
    row["eval"], why = eval_file(rec, sparrow, ckpt, paths["heldout"], model, log + ".eval")
    if why:
        row["why"] = why
    shutil.rmtree(ckpt, ignore_errors=True)
    return row


def torch_peer(rec, work, paths, tag, model="deepfm"):
    row = {"stream": tag, "model": model, "peer": "pytorch"}
    if not os.access(TORCH_PY, os.X_OK):
        row["why"] = "%s not found (Debian's python3 with python3-torch)" % TORCH_PY
        return row
    argv = [TORCH_PY, os.path.join(HERE, "deepfm_torch.py"), paths["train_json"],
            paths["heldout_json"], "--model", model, "--threads", str(os.cpu_count() or 1),
            "--fields", ",".join(FIELDS)]
    rc, out, secs = rec.run(argv, 1800, os.path.join(work, "deep-%s-torch-%s.log" % (tag, model)),
                            what="deep study: PyTorch %s on stream %s" % (model, tag))
    row.update({"rc": rc, "wall_s": round(secs, 1)})
    for ln in reversed(out.strip().splitlines()):
        if ln.startswith("{"):
            row["eval"] = json.loads(ln)
            row["ex_per_s"] = row["eval"].get("ex_per_s")
            return row
    row["why"] = "bench/deepfm_torch.py failed (rc=%s): %s" % (rc, out.strip()[-300:])
    return row


def k_part(rec, sparrow, work, size):
    """Part 3: DeepFM with K trainers under launch against one trainer."""
    st_gen = ss._stream(dict(STREAMS[0][2]))
    lsize = {"examples": size["kn"], "heldout": size["kh"], "partitions": size["partitions"],
             "duration": size["duration"]}
    heldout, want, facts = ss.make_stream(rec, sparrow, work, lsize, st_gen, "deep")
    st = {"heldout": heldout, "want_gen": want, "gen": st_gen}
    sets = ["trainer:" + s for s in model_sets("deepfm")]
    evaluator = [sparrow, "eval", "--set", "trainer.latent_dim=4"]  # launch's trainers' k
    for s in model_sets("deepfm"):
        evaluator += ["--set", s]
    specs = [("one trainer, batch 256", "async", "none", "async", 1, None, [])]
    for k in size["ks"]:
        specs.append(("one trainer, batch %d" % (k * ss.BATCH), "async", "none", "async", 1,
                      k * ss.BATCH, []))
        # sync's exact analogue: the batch of K trainers, the dense rate sync gives it
        # (pserver.sync.dense_lr_scale = sqrt)
        specs.append(("one trainer, batch %d, dense lr x sqrt(%d)" % (k * ss.BATCH, k), "async",
                      "none", "async", 1, k * ss.BATCH,
                      ["pserver:pserver.lr.dense=%g" % (DENSE_LR * math.sqrt(k))]))
        for label, mode, pen, fam, extra in K_MODES:
            specs.append(("%s, %d trainers" % (label, k), mode, pen, fam, k, None, extra))
    rows = []
    for desc, mode, pen, fam, k, batch, extra in specs:
        cfg = ss._config(desc, mode, pen, sets + extra, fam)
        spec = {"part": "deep", "stream": "deep", "config": "%s/%s" % (mode, pen), "cfg": cfg,
                "k": k, "slow": 0, "batch": batch}
        r = ss.one_run(rec, sparrow, evaluator, work, st, spec, lsize)
        r["desc"] = desc
        r["sync_rows"] = "dense" if "trainer:trainer.sync.rows=dense" in extra else "all"
        # the dense network stepped at sqrt(K) its rate: sync's default, or the baseline given it
        r["dense_lr_sqrt"] = (mode == "sync" and
                              "pserver:pserver.sync.dense_lr_scale=none" not in extra) or \
            any(e.startswith("pserver:pserver.lr.dense=") for e in extra)
        rows.append(r)
        ev = r.get("eval") or {}
        rec.note("deep:   %s: held-out logloss %s ex/s %s%s" % (
            desc, ev.get("logloss"), r.get("ex_per_s"), "" if r.get("ok") else
            " (%s)" % r.get("why")))
    return {"rows": rows, "facts": facts, "examples": size["kn"], "heldout": size["kh"]}


def run(rec, sparrow, work, quick, parts=("models", "k")):
    size = SIZES[bool(quick)]
    out = {"quick": bool(quick), "examples": size["n"], "heldout": size["h"], "streams": {},
           "rows": [], "failures": []}
    for tag, label, over in STREAMS if "models" in parts else []:
        paths, stats, clicks = make_streams(rec, sparrow, work, tag, over, size["n"], size["h"])
        out["streams"][tag] = {"label": label, "gen": stats, "json_clicks": clicks,
                               "props": ss._stream(over)}
        for model in MODELS:
            rec.note("deep: %s on stream %s" % (model, tag))
            r = one_trainer(rec, sparrow, work, paths, tag, model)
            out["rows"].append(r)
            if r.get("why"):
                out["failures"].append("%s/%s: %s" % (tag, model, r["why"]))
        if tag == "deep":
            r = torch_peer(rec, work, paths, tag)
            out["rows"].append(r)
            if r.get("why"):
                out["failures"].append("pytorch/%s: %s" % (tag, r["why"]))
            elif r["eval"].get("examples") != size["n"]:
                out["failures"].append("pytorch trained %s examples, want %d" %
                                       (r["eval"].get("examples"), size["n"]))
        for p in paths.values():
            os.unlink(p)
    if "k" not in parts:
        return out
    try:
        out["k"] = k_part(rec, sparrow, work, size)
        out["failures"] += ["K part: %s: %s" % (r["desc"], r["why"])
                            for r in out["k"]["rows"] if not r.get("ok")]
    except RuntimeError as e:
        out["failures"].append("K part: %s" % e)
    return out


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    build = os.path.abspath(argv[0])
    quick = "--quick" in argv
    dest = argv[argv.index("--json") + 1] if "--json" in argv else None
    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), "study_deep.%d" % os.getpid())
    os.makedirs(work)
    rec = rl.Recorder(log=lambda m: print(m, file=sys.stderr, flush=True))
    try:
        parts = ((argv[argv.index("--part") + 1],) if "--part" in argv else ("models", "k"))
        res = run(rec, os.path.join(build, "sparrow"), work, quick, parts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(res, indent=1)
    if dest:
        with open(dest, "w") as f:
            f.write(text)
    else:
        print(text)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
