#!/usr/bin/env python3
"""Scaling study: K = 1, 2, 4, 8, 16, 32 trainer processes (`sparrow launch`), modes async with
penalty none and inverse, ssp:4, hybrid:100 and sync (the clocked modes with the shards' inverse
penalty, as in the modes study), each with no straggler and with trainer K-1 slowed 4x
(trainer.debug.slow_factor; K = 1 has no other trainer to straggle against and runs only without).

The stream: the studies' common stream settings (report_lib.STREAM: seed 7, 39 fields, drift 0.5
rad/M, vocabulary up to 100,000; FM k=4 planted, as launch's generator). One `sparrow gen --n N+H`
to a file gives the held-out tail (its last H examples, which no trainer reads); every run's
generator produces the first N of the same stream into the Kafka mock (--backlog: before the
trainers start). That the two agree is checked, not assumed: `gen --n N` to a file must be the
byte prefix of `gen --n N+H` (same flags), and each run's generator must report the same click
rate and Bayes-optimal logloss/AUC over its N examples as `gen --n N` (every example's label and
oracle_p enter those; the Kafka stream's event times differ: launch stamps them from now).

Per run, trained until drained (the coordinator's LATEST checkpoint counts all N examples; a run
that does not drain within its --duration is reported as not drained and not evaluated): the
final model's held-out logloss and AUC by `sparrow eval --checkpoint RUN_DIR --in file:HELDOUT
--format pb --json`, beside the constant predictor's and the Bayes-optimal logloss of the same
examples (from eval's output), and its ratio to the baseline: one trainer on the same examples
(K = 1 of the same mode; for sync one trainer with batch K*B, B = 256 the trainers' batch, which
sync with K trainers of batch B should equal). From DIR/summary.json: the progressive logloss
(the trainers' final window, a quarter of each one's share, mean over trainers), examples/s
(launch's train_ex_per_s), the shards' staleness histogram (sparrow_ps_staleness: mean from its
sum and count, p50/p99 as bucket bounds), and the wait share: the seconds the trainers waited
for the coordinator during the run (sparrow_trainer_coord_wait_seconds, launch's run_wait_s)
over K times the run's duration.
Standalone: bench/study_scaling.py BUILD_DIR [--quick] [--eval PROGRAM]   (prints JSON)
  --eval PROGRAM: run PROGRAM instead of `BUILD_DIR/sparrow eval` (same arguments; for testing
  this script while `sparrow eval` is missing: figures from a stand-in are not measurements)."""

import json
import math
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402
import study_modes  # noqa: E402  (its samples.csv and log helpers)

# (mode, penalty)
MODES = [("async", "none"), ("async", "inverse"), ("ssp:4", "inverse"),
         ("hybrid:100", "inverse"), ("sync", "inverse")]
QUICK_MODES = [("sync", "inverse"), ("async", "inverse")]
KS = [1, 2, 4, 8, 16, 32]
QUICK_KS = [1, 2, 4]
STRAGGLERS = [0, 4]  # slow factor of trainer K-1; 0: none slowed
QUICK_STRAGGLERS = [0]
BATCH = 256  # launch's trainer batch (tools/src/pipeline.c)
SHARDS = 2
SAMPLES_MS = 100
GEN_RATE = 1000000  # event-time spacing; the Kafka stream is produced in one burst (--backlog)
# full / quick: trained examples N, held-out examples H, partitions (>= the largest K, and the
# Kafka mock keeps about 9000 examples per partition), the per-run timeout (launch --duration)
# and the study's time budget (runs not started by then are reported as not run)
SIZES = {False: {"examples": 100000, "heldout": 20000, "partitions": 64, "duration": 150,
                 "budget": 1500},
         True: {"examples": 20000, "heldout": 10000, "partitions": 8, "duration": 60,
                "budget": 120}}
EVAL_KEYS = ("examples", "rejected", "logloss", "auc", "mean_prediction", "click_rate",
             "calibration", "const_logloss", "bayes_logloss", "bayes_auc", "epoch", "model", "dim")
# a mode is "within" its baseline when its held-out logloss is at most this much above it
WITHIN = 0.005


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        else None


def gen_argv(sparrow, n, out):
    """`sparrow gen` with the flags launch gives its generator (tools/src/pipeline.c), the
    studies' stream settings and a fixed start time (the file's event times)."""
    return [sparrow, "gen", "--n", n, "--seed", rl.STREAM["seed"], "--fields", rl.STREAM["fields"],
            "--latent-dim", 4, "--drift", rl.STREAM["drift"], "--rate", GEN_RATE,
            "--set", "gen.vocab.max=%d" % rl.STREAM["vocab_max"], "--format", "pb", "--out", out]


def _records(data):
    """Offsets of the length-delimited records of data: [start of record i] + [len(data)]."""
    offs, i = [], 0
    while i < len(data):
        offs.append(i)
        ln, j = rl.pbwire.varint(data, i)
        i = j + ln
    offs.append(i)
    return offs


GEN_STATS = ("examples", "ctr", "bayes_logloss", "bayes_auc")


def _gen_stats(text):
    done = [ln for ln in text.splitlines() if " gen done " in ln]
    kv = rl.kv_all(done[-1]) if done else {}
    return {k: kv.get(k) for k in GEN_STATS}


def make_stream(rec, sparrow, work, size):
    """Writes the held-out tail; returns (heldout path, the gen stats of the first N, facts)."""
    n, h = size["examples"], size["heldout"]
    full, head = os.path.join(work, "scaling-all.pb"), os.path.join(work, "scaling-head.pb")
    rc, out_all, _ = rec.run(gen_argv(sparrow, n + h, full), 300,
                             os.path.join(work, "scaling-gen-all.log"),
                             what="scaling study: N+H examples (held-out tail)")
    if rc != 0:
        raise RuntimeError("sparrow gen --n %d failed (rc=%s): %s" % (n + h, rc, out_all[-300:]))
    rc, out_head, _ = rec.run(gen_argv(sparrow, n, head), 300,
                              os.path.join(work, "scaling-gen-head.log"),
                              what="scaling study: the first N examples, to check the prefix")
    if rc != 0:
        raise RuntimeError("sparrow gen --n %d failed (rc=%s): %s" % (n, rc, out_head[-300:]))
    with open(full, "rb") as f:
        data = f.read()
    with open(head, "rb") as f:
        head_data = f.read()
    offs = _records(data)
    if len(offs) - 1 != n + h:
        raise RuntimeError("%s holds %d records, want %d" % (full, len(offs) - 1, n + h))
    if data[:offs[n]] != head_data:
        raise RuntimeError("gen --n %d is not the prefix of gen --n %d with the same flags: the "
                           "held-out tail would not be the continuation of the trained stream"
                           % (n, n + h))
    heldout = os.path.join(work, "scaling-heldout.pb")
    with open(heldout, "wb") as f:
        f.write(data[offs[n]:])
    os.unlink(full)
    os.unlink(head)
    facts = {"gen_all": _gen_stats(out_all), "gen_head": _gen_stats(out_head),
             "prefix_bytes": offs[n], "heldout_bytes": len(data) - offs[n],
             "prefix_identical": True}
    return heldout, facts["gen_head"], facts


def launch_argv(sparrow, run_dir, k, mode, penalty, slow, size, batch=None, window=None):
    if window is None:
        window = max(100, size["examples"] // k // 4)  # a quarter of each trainer's share
    argv = [sparrow, "launch", "--quiet", "--run-dir", run_dir, "--trainers", k,
            "--shards", SHARDS, "--partitions", size["partitions"], "--mode", mode,
            "--penalty", penalty, "--seed", rl.STREAM["seed"], "--drift", rl.STREAM["drift"],
            "--examples", size["examples"], "--rate", GEN_RATE, "--backlog",
            "--checkpoint-interval", "5s",
            "--set", "coordinator:coordinator.member.timeout=60s",
            "--set", "gen:gen.vocab.max=%d" % rl.STREAM["vocab_max"],
            "--set", "trainer:trainer.eval.window=%s" % window,
            "--set", "trainer:trainer.log.interval=100ms",
            "--set", "trainer:kafka.session.timeout.ms=6000",
            "--set", "trainer:kafka.heartbeat.interval.ms=500",
            "--duration", size["duration"], "--samples-ms", SAMPLES_MS]
    if batch:
        argv += ["--set", "trainer:trainer.batch=%d" % batch]
    if slow:
        argv += ["--slow", "%d:%g" % (k - 1, slow)]
    return argv


def eval_argv(evaluator, run_dir, heldout):
    return evaluator + ["--checkpoint", run_dir, "--in", "file:" + heldout, "--format", "pb",
                        "--json"]


def run_eval(rec, evaluator, run_dir, heldout, log, what):
    """(eval dict, None) or (None, why)."""
    rc, out, _ = rec.run(eval_argv(evaluator, run_dir, heldout), 300, log + ".eval", what=what)
    if rc != 0:
        return None, "sparrow eval failed (rc=%s): %s" % (rc, out.strip()[-300:])
    for ln in reversed(out.strip().splitlines()):
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                d = json.loads(ln)
            except ValueError:
                continue
            missing = [key for key in ("logloss", "auc", "const_logloss", "bayes_logloss",
                                       "examples") if key not in d]
            if missing:
                return None, "sparrow eval --json lacks %s" % ", ".join(missing)
            return {key: d.get(key) for key in EVAL_KEYS}, None
    try:  # the object may span several lines
        d = json.loads(out[out.index("{"):out.rindex("}") + 1])
        return {key: d.get(key) for key in EVAL_KEYS}, None
    except ValueError:
        return None, "no JSON object in sparrow eval's output: %s" % out.strip()[-300:]


def one_run(rec, sparrow, evaluator, work, heldout, want_gen, k, mode, penalty, slow, size,
            batch=None):
    tag = "K%d-%s-%s-slow%g%s" % (k, mode.replace(":", ""), penalty.replace(":", ""), slow,
                                   "-b%d" % batch if batch else "")
    run_dir = os.path.join(work, "scaling-" + tag)
    log = os.path.join(work, "scaling-%s.log" % tag)
    argv = launch_argv(sparrow, run_dir, k, mode, penalty, slow, size, batch)
    what = "scaling study: K=%d %s, penalty %s, %s%s" % (
        k, mode, penalty, "trainer %d slowed %gx" % (k - 1, slow) if slow else "no straggler",
        ", batch %d (sync baseline)" % batch if batch else "")
    rc, out, secs = rec.run(argv, size["duration"] + 120, log, what=what)
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    st = s.get("staleness") or {}
    per = s.get("per_trainer") or []
    drained = bool(s.get("drained"))
    dur = _num(s.get("duration_s"))
    waits = [_num(t.get("run_wait_s")) for t in per]
    wait_share = (sum(waits) / (k * dur) if per and dur and all(w is not None for w in waits)
                  else None)
    gen_seen = {}
    try:
        with open(os.path.join(run_dir, "gen.log"), errors="replace") as f:
            gen_seen = _gen_stats(f.read())
    except OSError:
        pass
    row = {"k": k, "mode": mode, "penalty": penalty, "slow": slow, "batch": batch or BATCH,
           "baseline_run": bool(batch), "rc": rc, "drained": drained,
           "launch_ok": rc == 0 and bool(s.get("ok")) and drained,
           "ex_per_s": _num(s.get("train_ex_per_s")) if drained else None,
           "window_logloss": _num(s.get("window_logloss")),
           "window_bayes_logloss": _num(s.get("bayes_logloss")),
           "tau_mean": _num(st.get("mean")), "tau_p50": _num(st.get("p50")),
           "tau_p99": _num(st.get("p99")), "tau_count": _num(st.get("count")),
           "wait_share": wait_share, "duration_s": dur, "wall_s": round(secs, 1),
           "examples_produced": _num(s.get("examples_produced")),
           "examples_trained": _num(s.get("examples_trained")),
           "manifest_examples": _num((s.get("checkpoint") or {}).get("manifest_example_count")),
           "gen": gen_seen, "same_stream": gen_seen == want_gen,
           "eval": None}
    # a run whose LATEST checkpoint counts every example holds the final model even when a
    # process then failed to stop cleanly (e.g. librdkafka aborting in a trainer's close): it is
    # evaluated, and the stop failure is kept with the row
    row["complete"] = drained and row["manifest_examples"] == size["examples"]
    row["stop_problems"] = [ln.split("sparrow launch: ", 1)[1].split("; read ")[0]
                            for ln in out.splitlines() if "did not stop cleanly" in ln]
    why = None
    if not row["complete"]:
        why = rl.launch_failure(out, rc, s, drained, size["duration"],
                                "the LATEST checkpoint counts %s of %d examples" %
                                (row["manifest_examples"], size["examples"]))
    elif not row["same_stream"]:
        why = ("the run's generator reported %s, the file's first N %s: not the same examples"
               % (gen_seen, want_gen))
    else:
        row["eval"], why = run_eval(rec, evaluator, run_dir, heldout, log,
                                    what + ": sparrow eval")
    row["ok"] = why is None
    if why or not row["launch_ok"]:
        row["why"] = why
        with open(log, "a") as f:  # what the run's processes said last, kept with the results
            f.write("\n" + study_modes._tail(run_dir) + "\n")
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


def _ll(r):
    return (r.get("eval") or {}).get("logloss") if r and r.get("ok") else None


def baseline_of(rows, r):
    """The row r is judged against: K = 1 of its mode (no straggler); for sync with K > 1 the
    one-trainer run with batch K*B."""
    if r["mode"] == "sync" and r["k"] > 1:
        return next((b for b in rows if b["baseline_run"] and b["batch"] == r["k"] * BATCH), None)
    return next((b for b in rows if b["k"] == 1 and not b["baseline_run"] and b["slow"] == 0 and
                 b["mode"] == r["mode"] and b["penalty"] == r["penalty"]), None)


def judge(rows):
    for r in rows:
        b = baseline_of(rows, r)
        r["baseline"] = ("K=1 batch %d" % b["batch"]) if b else None
        ll, bl = _ll(r), _ll(b)
        r["baseline_logloss"] = bl
        r["ratio"] = ll / bl if ll is not None and bl else None
        ev = r.get("eval") or {}
        const = _num(ev.get("const_logloss"))
        r["diverged"] = (ll is not None and const is not None and ll > const)
        r["within"] = r["ratio"] is not None and r["ratio"] <= 1 + WITHIN


def plan(quick):
    ks = QUICK_KS if quick else KS
    modes = QUICK_MODES if quick else MODES
    stragglers = QUICK_STRAGGLERS if quick else STRAGGLERS
    out = []
    # the baselines first: every K = 1 run, then sync's one-large-batch runs
    for mode, pen in modes:
        out.append((1, mode, pen, 0, None))
    if any(m == "sync" for m, _ in modes):
        for k in ks:
            if k > 1:
                out.append((1, "sync", "inverse", 0, k * BATCH))
    for k in ks:
        if k == 1:
            continue
        for slow in stragglers:
            for mode, pen in modes:
                out.append((k, mode, pen, slow, None))
    return out, ks, modes, stragglers


def find_eval(rec, sparrow, evaluator):
    """The eval command line, or raises with what is missing."""
    cmd = evaluator or [sparrow, "eval"]
    rc, out, _ = rec.run(cmd + ["--help"], 60, what="scaling study: is sparrow eval there?")
    if rc != 0 or "usage" not in out.lower():
        raise RuntimeError("`%s --help` failed (rc=%s): this build has no `sparrow eval`, which "
                           "the scaling study needs for the held-out logloss; nothing was run "
                           "(it said: %s)" % (" ".join(cmd), rc,
                                              (out.strip().splitlines() or [""])[0]))
    return cmd


def run(rec, sparrow, work, quick, evaluator=None):
    size = SIZES[bool(quick)]
    evaluator = find_eval(rec, sparrow, evaluator)
    heldout, want_gen, facts = make_stream(rec, sparrow, work, size)
    todo, ks, modes, stragglers = plan(quick)
    rows, failures, skipped = [], [], []
    t0 = time.monotonic()
    for k, mode, pen, slow, batch in todo:
        name = "K=%d %s/%s/%s%s" % (k, mode, pen, "%gx" % slow if slow else "none",
                                    " batch %d" % batch if batch else "")
        if time.monotonic() - t0 > size["budget"]:
            skipped.append(name)
            continue
        rec.note("scaling: %s" % name)
        r = one_run(rec, sparrow, evaluator, work, heldout, want_gen, k, mode, pen, slow, size,
                    batch)
        rows.append(r)
        ev = r.get("eval") or {}
        if ev:  # the run's headline as it ends, so that a study cut short still says something
            rec.note("scaling:   held-out logloss %.5f auc %.4f (const %.5f, Bayes %.5f) "
                     "tau mean %.2f ex/s %.0f drained %s" %
                     (ev.get("logloss") or float("nan"), ev.get("auc") or float("nan"),
                      ev.get("const_logloss") or float("nan"),
                      ev.get("bayes_logloss") or float("nan"), r.get("tau_mean") or 0.0,
                      r.get("ex_per_s") or 0.0, r.get("drained")))
        if not r["ok"]:
            failures.append("%s: %s" % (name, r["why"]))
        elif not r["launch_ok"]:
            failures.append("%s: drained and evaluated, but launch failed (rc=%s): %s" %
                            (name, r["rc"], "; ".join(r["stop_problems"]) or "see its log"))
    judge(rows)
    for name in skipped:
        failures.append("%s: not run, the study's time budget of %d s was spent" %
                        (name, size["budget"]))
    cmd = launch_argv(sparrow, "$WORK/scaling-TAG", "K", "MODE", "PENALTY", 0, size,
                      window="N/K/4")
    return {"examples": size["examples"], "heldout": size["heldout"],
            "partitions": size["partitions"], "duration": size["duration"],
            "budget": size["budget"], "shards": SHARDS, "batch": BATCH, "ks": ks,
            "modes": [list(m) for m in modes], "stragglers": stragglers, "within": WITHIN,
            "stream": dict(rl.STREAM), "stream_check": facts, "rows": rows,
            "failures": failures, "skipped": skipped,
            "command": " ".join(str(a) for a in cmd) + " [--slow K-1:4] "
                       "[--set trainer:trainer.batch=K*%d]" % BATCH,
            "gen_command": " ".join(str(a) for a in gen_argv(sparrow, "N+H", "FILE")),
            "eval_command": " ".join(str(a) for a in eval_argv(evaluator, "RUN_DIR",
                                                               "HELDOUT"))}


if __name__ == "__main__":
    import tempfile
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    quick = "--quick" in sys.argv
    ev = sys.argv[sys.argv.index("--eval") + 1].split() if "--eval" in sys.argv else None
    sparrow = os.path.join(sys.argv[1], "sparrow")
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        rec = rl.Recorder(log=lambda m: print("[%5.0fs] %s" % (time.monotonic() - t_start, m),
                                              file=sys.stderr))
        try:
            res = run(rec, sparrow, work, quick, ev)
        except RuntimeError as e:
            sys.exit("study_scaling: FAILED: %s" % e)
        res["secs"] = round(time.monotonic() - t_start, 1)
        print(json.dumps(res, indent=1))
