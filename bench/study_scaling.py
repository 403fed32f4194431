#!/usr/bin/env python3
"""Scaling study (issues 9 and 15): K = 1, 2, 4, 8, 16, 32 trainer processes (`sparrow launch`)
in every training mode of issue 15, each with no straggler and with trainer K-1 slowed 4x
(trainer.debug.slow_factor; K = 1 has no other trainer to straggle against and runs only
without), then a "defaults check": the candidate default configurations (DEFAULT_CANDIDATES) on
three more generated streams (DEFAULTS_STREAMS: click rate and field count, vocabulary sizes and
popularity, drift) at K = 1, 8 and 32.

The configurations (CONFIGS; the main part runs MAIN, --modes picks others):
  sync                 a barrier every step (the shards' inverse penalty, as every clocked mode)
  sync+backup1/drop    coordinator.sync.backup=1: a step commits once the first K-1 trainers
                       pushed it; coordinator.sync.late=drop: the late push is dropped
  sync+backup1/apply   the same with coordinator.sync.late=apply: the late push is applied with
                       the shards' staleness penalty
  sync+elastic2        coordinator.elastic.factor=2: a trainer slower than the median of the
                       others by more than 2x for coordinator.elastic.steps (its default) steps
                       leaves the barrier and trains asynchronously, rejoining when it keeps up
  group:4/index        --mode group:4, coordinator.group.by=index: groups of 4 trainers, sync
                       inside a group, async between groups; only at K >= 4 (with K < G the K
                       trainers would form one group: the sync barrier at that K)
  group:4/speed        coordinator.group.by=speed
  async/none, async/inverse, async/adaptive, async/dc:0.04
                       asynchronous, with the shards' pserver.staleness.penalty; dc:0.04 (delay
                       compensation) with trainer.push.pulled=true on the trainers
  ssp:4, hybrid:100    the issue 9 clocked modes: not in MAIN (time), available with --modes
A straggler variant is skipped where it is meaningless: sync+elastic2 and group:4/speed without
a straggler are sync and group:4/index (nobody is slower than the others).

The stream: the studies' common stream settings (report_lib.STREAM: seed 7, 39 fields, drift 0.5
rad/M, vocabulary up to 100,000; FM k=4 planted, as launch's generator); the defaults check's
streams change some of them (DEFAULTS_STREAMS, passed as --set gen.KEY=VALUE to both
generators). Per stream, one `sparrow gen --n N+H` to a file gives the held-out tail (its last H
examples, which no trainer reads); every run's generator produces the first N of the same stream
into the Kafka mock (--backlog: before the trainers start). That the two agree is checked, not
assumed: `gen --n N` to a file must be the byte prefix of `gen --n N+H` (same flags), and each
run's generator must report the same click rate and Bayes-optimal logloss/AUC over its N
examples as `gen --n N` (every example's label and oracle_p enter those; the Kafka stream's
event times differ: launch stamps them from now).

Per run, trained until drained (the coordinator's LATEST checkpoint counts all N examples; a run
that does not drain within its --duration is reported as not drained and not evaluated): the
final model's held-out logloss and AUC by `sparrow eval --checkpoint RUN_DIR --in file:HELDOUT
--format pb --json`, beside the constant predictor's and the Bayes-optimal logloss of the same
examples (from eval's output), and its ratio to the baseline, one trainer on the same examples:
K = 1 of the same configuration for the async family; for the sync family one trainer with batch
K*B, B = 256 the trainers' batch, which sync with K trainers of batch B should equal; for group:G
one trainer with batch G*B (one group). A run whose held-out logloss is above the constant
predictor's (or not finite) is **diverged**. From DIR/summary.json: examples/s (launch's
train_ex_per_s) and its ratio to `sync` with the same straggler at the same K on the same stream,
the progressive logloss (the trainers' final window, a quarter of each one's share, mean over
trainers), the shards' staleness histogram (sparrow_ps_staleness: mean from its sum and count,
p50/p99 as bucket bounds) and per row class (staleness_class: launch's sum over the shards of
sparrow_ps_staleness_class{class="bias|top|rest"}, read from each shard's /metrics at the end of
the run; absent where the shards do not export it), and the wait share: the seconds the trainers
waited for the coordinator during the run (sparrow_trainer_coord_wait_seconds, launch's
run_wait_s) over K times the run's duration.

Time: about 130 launch runs of 60,000 examples, 10-20 s each on 2 cores (a run's fixed cost,
the Kafka group's assignment and the coordinator's startup grace, is some 10 s of it); runs not
started within --budget (default 2040 s, the main part stopping early enough to leave the
defaults check its share) are reported as not run. The main part's runs go baselines first, then
K = 32, 8, 16, 4, 2, so that a cut study loses the small K first.

Standalone: bench/study_scaling.py BUILD_DIR [--quick] [--modes LIST] [--candidates LIST]
            [--part main|defaults|both] [--budget SECONDS] [--eval PROGRAM] [--json FILE]
            [--md FILE]   (prints the JSON on stdout unless --json)
  --modes LIST       comma-separated configurations of the main part: names of CONFIGS or
                     MODE/PENALTY[+ROLE:key=value]... (e.g. sync/inverse,async/none); an unknown
                     setting fails that run loudly (launch, the coordinator, the shards and the
                     trainers refuse what they do not know)
                     (under bench/run_all: the environment's SPARROW_SCALING_MODES)
  --candidates LIST  the same, for the defaults check (default DEFAULT_CANDIDATES; under
                     bench/run_all: SPARROW_SCALING_CANDIDATES)
  --part             run only the main part or only the defaults check (default both)
  --budget SECONDS   the time budget (default 2040; --quick 150)
  --eval PROGRAM     run PROGRAM instead of `BUILD_DIR/sparrow eval` (same arguments; for testing
                     this script while `sparrow eval` is missing: not measurements)
  --json FILE        write the results there instead of stdout
  --md FILE          write the report's scaling section (bench/report.py) there, plots in
                     bench/ beside it"""

import csv
import json
import math
import os
import re
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402
import study_modes  # noqa: E402  (its log helpers)

BATCH = 256  # launch's trainer batch (tools/src/pipeline.c)
SHARDS = 2
SAMPLES_MS = 100
GEN_RATE = 1000000  # event-time spacing; the Kafka stream is produced in one burst (--backlog)
SYNC = "sync"  # the configuration examples/s is compared with


def _config(desc, mode, penalty, sets=(), family="async", slows=(0, 4)):
    """family: async (baseline K=1 of the same configuration), sync (one trainer with batch
    K*B), group (one trainer with batch G*B; runs at K >= G only). slows: the straggler variants
    that mean something for it."""
    group = int(mode.split(":")[1]) if mode.startswith("group:") else None
    return {"desc": desc, "mode": mode, "penalty": penalty, "sets": list(sets),
            "family": "group" if group else family, "group": group, "slows": list(slows)}


C = "coordinator:coordinator."
CONFIGS = {
    "sync": _config("a barrier every step", "sync", "inverse", family="sync"),
    "sync+backup1/drop": _config(
        "backup workers b=1 (a step commits on the first K-1 pushes), late pushes dropped", "sync", "inverse", [C + "sync.backup=1", C + "sync.late=drop"], "sync"),
    "sync+backup1/apply": _config(
        "backup workers b=1, late pushes applied with the shards' penalty (inverse)",
        "sync", "inverse", [C + "sync.backup=1", C + "sync.late=apply"], "sync"),
    "sync+elastic2": _config(
        "elastic F=2 (a trainer 2x slower than the others' median trains async until it "
        "keeps up)", "sync", "inverse", [C + "elastic.factor=2"], "sync", slows=(4,)),
    "group:4/index": _config(
        "groups of 4 by index (sync inside a group, async between groups)", "group:4", "inverse",
        [C + "group.by=index"]),
    "group:4/speed": _config(
        "groups of 4 by speed (trainers of similar speed together)", "group:4", "inverse",
        [C + "group.by=speed"], slows=(4,)),
    "async/none": _config("no staleness penalty", "async", "none"),
    "async/inverse": _config("penalty inverse (lr/(1+tau))", "async", "inverse"),
    "async/inverse+lat0.01": _config(
        "penalty inverse, the latent part's learning rate 0.01 (pserver.lr.latent; linear 0.05)",
        "async", "inverse", ["pserver:pserver.lr.latent=0.01"]),
    "async/adaptive": _config("penalty adaptive", "async", "adaptive"),
    "async/dc:0.04": _config("delay compensation dc:0.04 (trainer.push.pulled=true)",
                             "async", "dc:0.04", ["trainer:trainer.push.pulled=true"]),
    "ssp:4": _config("at most 4 steps ahead", "ssp:4", "inverse"),
    "hybrid:100": _config("a barrier every 100 steps", "hybrid:100", "inverse"),
}
MAIN = ["sync", "sync+backup1/drop", "sync+backup1/apply", "sync+elastic2", "group:4/index",
        "group:4/speed", "async/none", "async/inverse", "async/inverse+lat0.01", "async/adaptive",
        "async/dc:0.04"]
QUICK_MAIN = ["sync", "group:4/index", "async/adaptive"]
KS = [1, 2, 4, 8, 16, 32]
QUICK_KS = [1, 4]
K_ORDER = [32, 8, 16, 4, 2, 1]  # the order the main part runs its K > 1 (a cut study keeps these)
STRAGGLER = 4  # slow factor of trainer K-1 in the straggler variant
QUICK_SLOWS = [0]  # --quick: no straggler variant in the main part

# The defaults check. DEFAULT_CANDIDATES: the 2-3 candidate default configurations, to be filled
# in from the main table (names of CONFIGS, or MODE/PENALTY[+ROLE:key=value]...).
DEFAULT_CANDIDATES = ["sync+backup1/drop", "group:4/speed", "async/adaptive"]
DEFAULTS_KS = [1, 8, 32]
QUICK_DEFAULTS_KS = [1, 4]
DEFAULTS_SLOWS = [STRAGGLER]  # K > 1 runs of the defaults check: with the straggler
# the streams besides the main one: gen property -> value (the others as in report_lib.STREAM)
DEFAULTS_STREAMS = [
    ("ctr 0.037, 30 fields", {"gen.ctr": 0.037, "gen.fields": 30}),
    ("vocabulary 100..300,000, Zipf 1.05", {"gen.vocab.min": 100, "gen.vocab.max": 300000,
                                            "gen.zipf": 1.05}),
    ("drift 4 rad/M", {"gen.drift": 4.0}),
]
QUICK_DEFAULTS_STREAMS = DEFAULTS_STREAMS[:1]
QUICK_CANDIDATES = 1  # --quick: the first candidate only
# full / quick: trained examples N, held-out examples H, partitions (>= the largest K, and the
# Kafka mock keeps about 9000 examples per partition), the per-run timeout (launch --duration)
# and the study's time budget (runs not started by then are reported as not run); est_run_s: a
# run's expected wall time, to leave the defaults check its share of the budget
SIZES = {False: {"examples": 60000, "heldout": 20000, "partitions": 64, "duration": 120,
                 "budget": 2040, "est_run_s": 14},
         True: {"examples": 20000, "heldout": 10000, "partitions": 8, "duration": 60,
                "budget": 150, "est_run_s": 11}}
EVAL_KEYS = ("examples", "rejected", "logloss", "auc", "mean_prediction", "click_rate",
             "calibration", "const_logloss", "bayes_logloss", "bayes_auc", "epoch", "model", "dim")
# a run is "within" its baseline when its held-out logloss is at most this much above it
WITHIN = 0.005


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        else None


def resolve(names):
    """[(name, config)] for names of CONFIGS or MODE/PENALTY[+ROLE:key=value]... specs; raises
    ValueError on a malformed one (launch refuses unknown modes, penalties and roles, and the
    roles unknown keys: an unknown setting fails its run loudly)."""
    out = []
    for name in names:
        name = name.strip()
        if not name:
            continue
        if name in CONFIGS:
            out.append((name, CONFIGS[name]))
            continue
        head, *sets = name.split("+")
        if "/" not in head or any(":" not in s or "=" not in s for s in sets):
            raise ValueError("%r: not a configuration (%s) nor MODE/PENALTY[+ROLE:key=value]..." %
                             (name, ", ".join(CONFIGS)))
        mode, penalty = head.split("/", 1)
        if (mode, penalty, sets) == (CONFIGS[SYNC]["mode"], CONFIGS[SYNC]["penalty"], []):
            out.append((SYNC, CONFIGS[SYNC]))  # the examples/s reference under its own name
            continue
        fam = "sync" if mode == "sync" else "async"
        out.append((name, _config(name, mode, penalty, sets, fam)))
    if len(set(n for n, _ in out)) != len(out):
        raise ValueError("a configuration is named twice: %s" % ", ".join(names))
    return out


def _stream(over=None):
    """The generator properties of a stream: report_lib.STREAM with over's changes."""
    s = {"gen.seed": rl.STREAM["seed"], "gen.fields": rl.STREAM["fields"],
         "gen.drift": rl.STREAM["drift"], "gen.vocab.max": rl.STREAM["vocab_max"]}
    s.update(over or {})
    return s


def _gen_sets(stream):
    """--set values for the properties launch's generator does not take from its own flags (its
    --seed and --drift are launch's; it gives gen --fields 39, which a --set overrides)."""
    return ["%s=%s" % (k, v) for k, v in sorted(stream.items())
            if k not in ("gen.seed", "gen.drift") and not (k == "gen.fields" and v == 39)]


def gen_argv(sparrow, n, out, stream=None):
    """`sparrow gen` with the flags launch gives its generator (tools/src/pipeline.c), the
    stream's settings and a fixed start time (the file's event times)."""
    stream = stream or _stream()
    argv = [sparrow, "gen", "--n", n, "--seed", stream["gen.seed"], "--fields", 39,
            "--latent-dim", 4, "--drift", stream["gen.drift"], "--rate", GEN_RATE]
    for s in _gen_sets(stream):
        argv += ["--set", s]
    return argv + ["--format", "pb", "--out", out]


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


def make_stream(rec, sparrow, work, size, stream=None, tag="main"):
    """Writes the held-out tail; returns (heldout path, the gen stats of the first N, facts)."""
    n, h = size["examples"], size["heldout"]
    full = os.path.join(work, "scaling-%s-all.pb" % tag)
    head = os.path.join(work, "scaling-%s-head.pb" % tag)
    rc, out_all, _ = rec.run(gen_argv(sparrow, n + h, full, stream), 300,
                             os.path.join(work, "scaling-gen-%s-all.log" % tag),
                             what="scaling study: N+H examples (held-out tail), stream %s" % tag)
    if rc != 0:
        raise RuntimeError("sparrow gen --n %d failed (rc=%s): %s" % (n + h, rc, out_all[-300:]))
    rc, out_head, _ = rec.run(gen_argv(sparrow, n, head, stream), 300,
                              os.path.join(work, "scaling-gen-%s-head.log" % tag),
                              what="scaling study: the first N examples, to check the prefix, "
                                   "stream %s" % tag)
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
    heldout = os.path.join(work, "scaling-%s-heldout.pb" % tag)
    with open(heldout, "wb") as f:
        f.write(data[offs[n]:])
    os.unlink(full)
    os.unlink(head)
    facts = {"gen_all": _gen_stats(out_all), "gen_head": _gen_stats(out_head),
             "prefix_bytes": offs[n], "heldout_bytes": len(data) - offs[n],
             "prefix_identical": True}
    return heldout, facts["gen_head"], facts


def launch_argv(sparrow, run_dir, k, cfg, slow, size, batch=None, window=None, stream=None):
    stream = stream or _stream()
    if window is None:
        window = max(100, size["examples"] // k // 4)  # a quarter of each trainer's share
    argv = [sparrow, "launch", "--quiet", "--run-dir", run_dir, "--trainers", k,
            "--shards", SHARDS, "--partitions", size["partitions"], "--mode", cfg["mode"],
            "--penalty", cfg["penalty"], "--seed", stream["gen.seed"],
            "--drift", stream["gen.drift"], "--examples", size["examples"], "--rate", GEN_RATE,
            "--backlog", "--checkpoint-interval", "5s",
            "--set", "coordinator:coordinator.member.timeout=60s"]
    for s in _gen_sets(stream):
        argv += ["--set", "gen:" + s]
    argv += ["--set", "trainer:trainer.eval.window=%s" % window,
             "--set", "trainer:trainer.log.interval=100ms",
             "--set", "trainer:kafka.session.timeout.ms=6000",
             "--set", "trainer:kafka.heartbeat.interval.ms=500",
             "--duration", size["duration"], "--samples-ms", SAMPLES_MS]
    for s in cfg["sets"]:
        argv += ["--set", s]
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


def _tau(h):
    """mean, p50, p99, count of one of summary.json's histograms (None where empty)."""
    h = h or {}
    return {"mean": _num(h.get("mean")), "p50": _num(h.get("p50")), "p99": _num(h.get("p99")),
            "count": _num(h.get("count"))}


def _tag(spec):
    t = "%s-K%d-%s-slow%g%s" % (spec["stream"], spec["k"], spec["config"], spec["slow"],
                                "-b%d" % spec["batch"] if spec["batch"] else "")
    return "".join(c if c.isalnum() or c in "-." else "_" for c in t)


def busy_rate(path):
    """Examples/s while every trainer had data: the examples trained by the time the first
    trainer finished its share (its count reached its final value), over the time since the
    first example, from launch's samples.csv (t_ms, trainer, ..., examples per trainer). With
    fixed partitions a straggler's own share ends every mode's run at the same time, so the
    time to drain measures the straggler, not the mode; None when the series is too short."""
    per = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                t, tr, ex = float(row["t_ms"]), row["trainer"], float(row["examples"])
                if ex >= 0:
                    per.setdefault(tr, []).append((t, ex))
    except (OSError, KeyError, ValueError):
        return None
    done, start = [], None
    for pts in per.values():
        pts.sort()
        final = pts[-1][1]
        if final <= 0:
            continue
        done.append(next(t for t, ex in pts if ex >= final))
        first = next((t for t, ex in pts if ex > 0), None)
        if first is not None and (start is None or first < start):
            start = first
    if not done or start is None:
        return None
    t1 = min(done)
    total = 0.0
    for pts in per.values():
        total += max([ex for t, ex in pts if t <= t1] or [0.0])
    return total / ((t1 - start) / 1000.0) if t1 - start >= 500 else None


def one_run(rec, sparrow, evaluator, work, st, spec, size):
    """One launch run and its evaluation. st: the stream's dict (heldout, want_gen, gen props);
    spec: part, stream, config, cfg, k, slow, batch (None: B; set: a one-trainer baseline)."""
    k, cfg, slow, batch = spec["k"], spec["cfg"], spec["slow"], spec["batch"]
    tag = _tag(spec)
    run_dir = os.path.join(work, "scaling-" + tag)
    log = os.path.join(work, "scaling-%s.log" % tag)
    argv = launch_argv(sparrow, run_dir, k, cfg, slow, size, batch, stream=st["gen"])
    what = "scaling study (%s, stream %s): K=%d %s, %s%s" % (
        spec["part"], spec["stream"], k, spec["config"],
        "trainer %d slowed %gx" % (k - 1, slow) if slow else "no straggler",
        ", batch %d (one-trainer baseline)" % batch if batch else "")
    rc, out, secs = rec.run(argv, size["duration"] + 120, log, what=what)
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    st_all = _tau(s.get("staleness"))
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
    row = {"part": spec["part"], "stream": spec["stream"], "config": spec["config"],
           "desc": ("one trainer, batch %d (baseline of the sync family and group:G)" % batch
                    if batch else cfg["desc"]),
           "family": cfg["family"], "group": cfg["group"], "sets": cfg["sets"],
           "k": k, "mode": cfg["mode"], "penalty": cfg["penalty"], "slow": slow,
           "batch": batch or BATCH, "baseline_run": bool(batch), "rc": rc, "drained": drained,
           "launch_ok": rc == 0 and bool(s.get("ok")) and drained,
           "ex_per_s": _num(s.get("train_ex_per_s")) if drained else None,
           "window_logloss": _num(s.get("window_logloss")),
           "window_bayes_logloss": _num(s.get("bayes_logloss")),
           "tau_mean": st_all["mean"], "tau_p50": st_all["p50"], "tau_p99": st_all["p99"],
           "tau_count": st_all["count"],
           # per row class: launch's staleness_class ({} where the shards lack the histogram)
           "tau_class": {c: _tau(h) for c, h in (s.get("staleness_class") or {}).items()},
           "wait_share": wait_share, "duration_s": dur, "wall_s": round(secs, 1),
           "examples_produced": _num(s.get("examples_produced")),
           "examples_trained": _num(s.get("examples_trained")),
           "manifest_examples": _num((s.get("checkpoint") or {}).get("manifest_example_count")),
           "gen": gen_seen, "same_stream": gen_seen == st["want_gen"],
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
        # a role that refused a setting it does not know (a build without issue 15's modes)
        said = [ln.strip() for ln in _logs(run_dir) if CLI_REFUSAL.match(ln)]
        said += [ln.strip() for ln in out.splitlines() if ln.startswith("sparrow launch: --")]
        if said:
            why += "; " + said[0][-200:]
    elif not row["same_stream"]:
        why = ("the run's generator reported %s, the file's first N %s: not the same examples"
               % (gen_seen, st["want_gen"]))
    else:
        row["eval"], why = run_eval(rec, evaluator, run_dir, st["heldout"], log,
                                    what + ": sparrow eval")
    row["ok"] = why is None
    if why or not row["launch_ok"]:
        row["why"] = why
        with open(log, "a") as f:  # what the run's processes said last, kept with the results
            f.write("\n" + study_modes._tail(run_dir) + "\n")
    row["busy_ex_per_s"] = busy_rate(os.path.join(run_dir, "samples.csv")) if drained else None
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


# a role's refusal of its command line: "sparrow pserver: --set KEY=VALUE: ..." (unknown key, a
# value not among those it knows)
CLI_REFUSAL = re.compile(r"^[\w.-]+\.log: sparrow [\w-]+: --")


def _logs(run_dir):
    """Every line of the run's role logs, each after its log's name."""
    out = []
    try:
        names = sorted(n for n in os.listdir(run_dir) if n.endswith(".log"))
    except OSError:
        return out
    for n in names:
        with open(os.path.join(run_dir, n), errors="replace") as f:
            out += ["%s: %s" % (n, ln) for ln in f.read().splitlines()]
    return out


def _ll(r):
    return (r.get("eval") or {}).get("logloss") if r and r.get("ok") else None


def baseline_of(rows, r):
    """The row r is judged against, on the same stream and in the same part: K = 1 of its
    configuration (no straggler) for the async family and for K=1 itself; the one-trainer run
    with batch K*B for the sync family at K > 1 and with batch G*B for group:G; a one-trainer
    baseline run is judged against K = 1 of sync (batch B)."""
    same = [b for b in rows if b["stream"] == r["stream"] and b["part"] == r["part"]]
    if r.get("baseline_run"):
        return next((b for b in same if b["k"] == 1 and not b["baseline_run"] and
                     b["config"] == SYNC), None)
    if r["family"] == "sync" and r["k"] > 1:
        want = r["k"] * BATCH
    elif r["family"] == "group":
        want = r["group"] * BATCH
    else:
        return next((b for b in same if b["k"] == 1 and not b["baseline_run"] and
                     b["slow"] == 0 and b["config"] == r["config"]), None)
    return next((b for b in same if b["baseline_run"] and b["batch"] == want), None)


def diverged(r):
    """Held-out logloss above the constant predictor's, or not finite (eval prints null)."""
    ev = r.get("eval") if r.get("ok") else None
    if not ev:
        return False
    ll, const = ev.get("logloss"), _num(ev.get("const_logloss"))
    if _num(ll) is None:
        return True
    return const is not None and ll > const


def judge(rows):
    for r in rows:
        b = baseline_of(rows, r)
        r["baseline"] = (("K=1 batch %d" % b["batch"]) if b["baseline_run"] else
                         "K=1 %s" % b["config"]) if b and b is not r else None
        ll, bl = _num(_ll(r)), _num(_ll(b))
        r["baseline_logloss"] = bl
        r["is_baseline"] = b is r
        r["ratio"] = ll / bl if ll is not None and bl else None
        r["diverged"] = diverged(r)
        r["within"] = r["ratio"] is not None and r["ratio"] <= 1 + WITHIN
        # examples/s against sync with the same straggler at the same K on the same stream
        ref = None if r["baseline_run"] else next(
            (s for s in rows if s["config"] == SYNC and not s["baseline_run"] and
             s["stream"] == r["stream"] and s["part"] == r["part"] and s["k"] == r["k"] and
             s["slow"] == r["slow"]), None)
        r["speed_ref"] = "sync K=%d" % ref["k"] if ref else None
        r["speed_ratio"] = (r["ex_per_s"] / ref["ex_per_s"]
                            if ref and r.get("ex_per_s") and ref.get("ex_per_s") else None)
        r["busy_ratio"] = (r["busy_ex_per_s"] / ref["busy_ex_per_s"]
                           if ref and r.get("busy_ex_per_s") and ref.get("busy_ex_per_s")
                           else None)


def _spec(part, stream, name, cfg, k, slow, batch=None):
    return {"part": part, "stream": stream, "config": "baseline" if batch else name,
            "cfg": CONFIGS[SYNC] if batch else cfg, "k": k, "slow": slow, "batch": batch}


def plan_part(part, stream, configs, ks, slows, order=None):
    """The runs of one part on one stream, baselines first, then K in K_ORDER; returns (runs,
    what is not run by design)."""
    runs, skipped, seen = [], [], set()

    def add(s):
        key = (s["stream"], s["config"], s["k"], s["slow"], s["batch"])
        if key not in seen:
            seen.add(key)
            runs.append(s)

    order = order or K_ORDER
    big = sorted((k for k in ks if k > 1), key=lambda k: order.index(k) if k in order else 99)
    for name, cfg in configs:  # K = 1 of the async family and of plain sync
        if 1 in ks and (cfg["family"] == "async" or name == SYNC):
            add(_spec(part, stream, name, cfg, 1, 0))
    for name, cfg in configs:  # the one-trainer baselines with batch K*B or G*B
        if cfg["family"] == "sync":
            for k in sorted(big):
                add(_spec(part, stream, name, cfg, 1, 0, k * BATCH))
        elif cfg["family"] == "group" and any(k >= cfg["group"] for k in big):
            add(_spec(part, stream, name, cfg, 1, 0, cfg["group"] * BATCH))
    for k in big:
        for name, cfg in configs:
            if cfg["family"] == "group" and k < cfg["group"]:
                continue
            for slow in slows:
                if slow in cfg["slows"]:
                    add(_spec(part, stream, name, cfg, k, slow))
    for name, cfg in configs:
        low = [k for k in big if cfg["family"] == "group" and k < cfg["group"]]
        if low:
            skipped.append("`%s` at K=%s: K < G=%d, the K trainers would form one group, the "
                           "sync barrier at that K (the `sync` row)" %
                           (name, ", ".join(map(str, sorted(low))), cfg["group"]))
        for slow in slows:
            if slow not in cfg["slows"] and big:
                skipped.append("`%s` %s: the same as `%s`" % (
                    name, "without a straggler" if not slow else "with the straggler",
                    SYNC if cfg["family"] == "sync" else
                    "group:%d/index" % cfg["group"] if cfg["family"] == "group" else "?"))
    return runs, skipped


def plan_defaults(stream, cands, ks, slows):
    """The defaults check on one stream: the candidates' runs and baselines, and sync at the
    same K and straggler (the examples/s reference) where sync is not a candidate."""
    runs, _ = plan_part("defaults", stream, cands, ks, slows)
    if not any(n == SYNC for n, _ in cands):
        keys = set((s["config"], s["k"], s["slow"], s["batch"]) for s in runs)
        for k in ks:
            for slow in slows:
                if k > 1 and (SYNC, k, slow, None) not in keys:
                    runs.append(_spec("defaults", stream, SYNC, CONFIGS[SYNC], k, slow))
    # K = 1 runs first, then K as in K_ORDER (a cut check loses the small K first)
    return sorted(runs, key=lambda s: (s["k"] > 1, K_ORDER.index(s["k"]) if s["k"] in K_ORDER
                                       else 99))


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


def _name(spec):
    return "%s%s K=%d, straggler %s%s" % (
        "" if spec["part"] == "main" else "defaults check, stream %s: " % spec["stream"],
        spec["config"], spec["k"], "%gx" % spec["slow"] if spec["slow"] else "none",
        ", batch %d" % spec["batch"] if spec["batch"] else "")


def _env_list(name):
    v = os.environ.get(name, "").strip()
    return v.split(",") if v else None


def run(rec, sparrow, work, quick, evaluator=None, modes=None, candidates=None, part="both",
        budget=None):
    size = SIZES[bool(quick)]
    budget = budget or size["budget"]
    # the environment's lists stand in for the flags under bench/run_all (testing a build without
    # some of the modes: SPARROW_SCALING_MODES=sync,async/inverse)
    modes = modes or _env_list("SPARROW_SCALING_MODES")
    candidates = candidates or _env_list("SPARROW_SCALING_CANDIDATES")
    configs = resolve(modes or (QUICK_MAIN if quick else MAIN))
    cands = resolve(candidates or (DEFAULT_CANDIDATES[:QUICK_CANDIDATES] if quick
                                   else DEFAULT_CANDIDATES))
    evaluator = find_eval(rec, sparrow, evaluator)
    ks = QUICK_KS if quick else KS
    slows = QUICK_SLOWS if quick else [0, STRAGGLER]
    dks = QUICK_DEFAULTS_KS if quick else DEFAULTS_KS
    dstreams = QUICK_DEFAULTS_STREAMS if quick else DEFAULTS_STREAMS
    streams = {}  # tag -> {label, gen, heldout, want_gen, facts}
    todo, by_design = [], []
    if part in ("both", "main"):
        streams["main"] = {"label": "main", "gen": _stream()}
        r, sk = plan_part("main", "main", configs, ks, slows)
        todo += r
        by_design += sk
    n_main = len(todo)
    if part in ("both", "defaults"):
        for i, (label, over) in enumerate(dstreams):
            tag = "s%d" % (i + 1)
            streams[tag] = {"label": label, "gen": _stream(over)}
            todo += plan_defaults(tag, cands, dks, DEFAULTS_SLOWS)
    rows, failures, skipped = [], [], []
    t0 = time.monotonic()
    # the main part leaves the defaults check its expected share of the budget
    reserve = min(0.4 * budget, size["est_run_s"] * (len(todo) - n_main))
    for i, spec in enumerate(todo):
        st = streams[spec["stream"]]
        if "heldout" not in st:
            try:
                st["heldout"], st["want_gen"], st["facts"] = make_stream(
                    rec, sparrow, work, size, st["gen"], spec["stream"])
            except RuntimeError as e:
                if spec["stream"] == "main":
                    raise
                st["heldout"], st["error"] = None, str(e)
        name = _name(spec)
        deadline = budget - (reserve if i < n_main else 0)
        if time.monotonic() - t0 > deadline or st.get("heldout") is None:
            skipped.append(name)
            failures.append("%s: not run, %s" % (
                name, st["error"] if st.get("error") else
                "the study's time budget of %d s was spent%s" %
                (budget, " (the main part's share: %d s)" % deadline if i < n_main else "")))
            continue
        rec.note("scaling: %s" % name)
        r = one_run(rec, sparrow, evaluator, work, st, spec, size)
        rows.append(r)
        ev = r.get("eval") or {}
        if ev:  # the run's headline as it ends, so that a study cut short still says something
            rec.note("scaling:   held-out logloss %s auc %s (const %s, Bayes %s) tau mean %.2f "
                     "ex/s %.0f wall %.0f s" %
                     (ev.get("logloss"), ev.get("auc"), ev.get("const_logloss"),
                      ev.get("bayes_logloss"), r.get("tau_mean") or 0.0,
                      r.get("ex_per_s") or 0.0, r["wall_s"]))
        if not r["ok"]:
            failures.append("%s: %s" % (name, r["why"]))
        elif not r["launch_ok"]:
            failures.append("%s: drained and evaluated, but launch failed (rc=%s): %s" %
                            (name, r["rc"], "; ".join(r["stop_problems"]) or "see its log"))
    judge(rows)
    cmd = launch_argv(sparrow, "$WORK/scaling-TAG", "K", {"mode": "MODE", "penalty": "PENALTY",
                                                            "sets": []}, 0, size,
                      window="N/K/4")
    return {"examples": size["examples"], "heldout": size["heldout"],
            "partitions": size["partitions"], "duration": size["duration"],
            "budget": budget, "shards": SHARDS, "batch": BATCH, "ks": ks,
            "slows": slows, "straggler": STRAGGLER, "within": WITHIN, "part": part,
            "configs": [dict(c, name=n) for n, c in configs],
            "modes": [[c["mode"], c["penalty"]] for _, c in configs],
            "candidates": [n for n, _ in cands], "defaults_ks": dks,
            "defaults_slows": DEFAULTS_SLOWS,
            "streams": {t: {"label": s["label"], "gen": s["gen"], "check": s.get("facts"),
                            "error": s.get("error")} for t, s in streams.items()},
            "stream": dict(rl.STREAM), "stream_check": (streams.get("main") or {}).get("facts"),
            "rows": rows, "failures": failures, "skipped": skipped, "by_design": by_design,
            "planned": len(todo),
            "command": " ".join(str(a) for a in cmd) + " [--set ROLE:KEY=VALUE of the "
                       "configuration] [--slow K-1:%d] [--set trainer:trainer.batch=K*%d]" %
                       (STRAGGLER, BATCH),
            "gen_command": " ".join(str(a) for a in gen_argv(sparrow, "N+H", "FILE")),
            "eval_command": " ".join(str(a) for a in eval_argv(evaluator, "RUN_DIR",
                                                               "HELDOUT"))}


def main(argv):
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__, usage=argparse.SUPPRESS,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--modes")
    ap.add_argument("--candidates")
    ap.add_argument("--part", choices=("both", "main", "defaults"), default="both")
    ap.add_argument("--budget", type=float)
    ap.add_argument("--eval")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args(argv)
    try:
        modes = resolve(a.modes.split(",")) and a.modes.split(",") if a.modes else None
        cands = resolve(a.candidates.split(",")) and a.candidates.split(",") \
            if a.candidates else None
    except ValueError as e:
        sys.exit("study_scaling: %s" % e)
    sparrow = os.path.join(os.path.abspath(a.build), "sparrow")
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="study_scaling.") as work:
        rec = rl.Recorder(log=lambda m: print("[%5.0fs] %s" % (time.monotonic() - t_start, m),
                                              file=sys.stderr, flush=True))
        try:
            res = run(rec, sparrow, work, a.quick, a.eval.split() if a.eval else None, modes,
                      cands, a.part, a.budget)
        except RuntimeError as e:
            sys.exit("study_scaling: FAILED: %s" % e)
        res["secs"] = round(time.monotonic() - t_start, 1)
        res["status"] = "ok" if not res["failures"] else "failed runs: %d" % len(res["failures"])
        res["commands"] = rec.commands
        text = json.dumps(res, indent=1)
        if a.json:
            with open(a.json, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
        if a.md:
            import report
            out_dir = os.path.dirname(os.path.abspath(a.md))
            plots = report.Plots(os.path.join(out_dir, "bench"), "bench")
            wrap = {"studies": {"scaling": res}, "quick": a.quick, "work": work,
                    "root": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
            lines, _ = report.scaling_section(wrap, plots)
            lines += report.scaling_choose(res)
            with open(a.md, "w") as f:
                f.write("\n".join(lines).rstrip() + "\n")
        return 0 if not res["failures"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
