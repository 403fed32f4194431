#!/usr/bin/env python3
"""Modes study (issue 9): the clock modes and staleness penalties, each with no straggler and with
one trainer slowed 2x and 4x (trainer.debug.slow_factor: the trainer's own work, reading, pulling,
computing and pushing, is stretched by sleeping; its waits for the coordinator are not; on a
machine whose cores the whole cluster shares, the others get the CPU it leaves). Every configuration is one `sparrow launch` run (4 CPU trainers, 2
shards, the coordinator, the Kafka mock) of the same generated stream: the studies' common stream
settings (seed 7, 39 fields, drift 0.5 rad/M, vocabulary up to 100,000), produced before the
trainers start (--backlog) so that the trainers, not the generator, set the pace, and trained
until drained (the coordinator's LATEST checkpoint counts every example). A run that does not
drain within its --duration is reported as not drained, with the figures it had.

Per run, from DIR/summary.json: examples/s (launch's train_ex_per_s: N over the time from the last
100 ms sample that saw no example trained to the first that saw all N), the final
window logloss/AUC and the Bayes-optimal logloss/AUC of the same windows (means over the
trainers), the shards' staleness histogram (sparrow_ps_staleness: bucket bounds and counts), the
trainers' checkpoint pause (p50/p99, bucket bounds), the examples each trainer trained; from
DIR/samples.csv: the trainers' mean window logloss against the examples seen by all trainers
together (a point every 100 ms; each trainer's window is its last W examples).
Standalone: bench/study_modes.py BUILD_DIR [--quick]   (prints JSON)"""

import csv
import json
import math
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402

# (mode, penalty): the penalty matters where pushes are stale, so the clocked modes keep the
# shards' inverse penalty (as bench/modes_bench.sh does) and async is run with each
MODES = [("sync", "inverse"), ("async", "none"), ("async", "inverse"), ("async", "exp:0.5"),
         ("ssp:1", "inverse"), ("ssp:4", "inverse"), ("ssp:16", "inverse"),
         ("hybrid:10", "inverse"), ("hybrid:100", "inverse")]
STRAGGLERS = [0, 2, 4]  # slow factor of trainer 3; 0: none slowed
QUICK_MODES = [("sync", "inverse"), ("async", "inverse"), ("hybrid:10", "inverse")]
QUICK_STRAGGLERS = [0, 2]
TRAINERS, SHARDS, SLOWED = 4, 2, 3
SAMPLES_MS = 100
# full / quick: examples, partitions (the Kafka mock keeps about 9000 examples per partition),
# the per-run timeout (launch --duration) and the study's time budget (runs not started by then
# are reported as not run)
SIZES = {False: {"examples": 300000, "partitions": 64, "duration": 120, "budget": 900},
         True: {"examples": 40000, "partitions": 16, "duration": 60, "budget": 150}}
MAX_POINTS = 80


def argv_for(sparrow, run_dir, mode, penalty, slow, size):
    window = size["examples"] // TRAINERS // 4  # a quarter of each trainer's share
    argv = [sparrow, "launch", "--quiet", "--run-dir", run_dir, "--trainers", TRAINERS,
            "--shards", SHARDS, "--partitions", size["partitions"], "--mode", mode,
            "--penalty", penalty, "--seed", rl.STREAM["seed"], "--drift", rl.STREAM["drift"],
            "--examples", size["examples"], "--rate", 1000000, "--backlog",
            "--checkpoint-interval", "5s",
            "--set", "coordinator:coordinator.member.timeout=60s",
            "--set", "gen:gen.vocab.max=%d" % rl.STREAM["vocab_max"],
            "--set", "trainer:trainer.eval.window=%d" % window,
            "--set", "trainer:trainer.log.interval=100ms",  # the window gauges update this often
            # librdkafka's 45 s session timeout would hold the group's first assignment while a
            # member paused by --backlog expires (some runs then wait 45 s before training)
            "--set", "trainer:kafka.session.timeout.ms=6000",
            "--set", "trainer:kafka.heartbeat.interval.ms=500",
            "--duration", size["duration"], "--samples-ms", SAMPLES_MS]
    if slow:
        argv += ["--slow", "%d:%g" % (SLOWED, slow)]
    return argv


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        else None


def series(path):
    """[[examples seen by all trainers, mean window logloss of the trainers that report one]] from
    a samples.csv, one point per sample time where the point changed, thinned to MAX_POINTS."""
    by_t = {}
    try:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                by_t.setdefault(int(r["t_ms"]), []).append(r)
    except (OSError, ValueError, KeyError, csv.Error):
        return []
    pts = []
    for t in sorted(by_t):
        ex = sum(max(0.0, rl.num(r.get("examples"), 0.0)) for r in by_t[t])
        ll = [rl.num(r.get("window_logloss")) for r in by_t[t]]
        ll = [x for x in ll if x is not None and x > 0]
        if not ll:
            continue
        p = [ex, round(sum(ll) / len(ll), 5)]
        if not pts or pts[-1] != p:
            pts.append(p)
    if len(pts) > MAX_POINTS:
        step = len(pts) / float(MAX_POINTS - 1)
        pts = [pts[int(i * step)] for i in range(MAX_POINTS - 1)] + [pts[-1]]
    return pts


def _tail(run_dir, lines=25):
    """The last lines of every log of a run directory (for a failed run's record)."""
    out = []
    try:
        names = sorted(n for n in os.listdir(run_dir) if n.endswith(".log"))
    except OSError:
        return ""
    for n in names:
        with open(os.path.join(run_dir, n), errors="replace") as f:
            text = f.read().splitlines()[-lines:]
        out.append("==> %s <==\n%s" % (n, "\n".join(text)))
    return "\n".join(out)


def one_run(rec, sparrow, work, mode, penalty, slow, size):
    tag = "%s-%s-slow%g" % (mode.replace(":", ""), penalty.replace(":", ""), slow)
    run_dir = os.path.join(work, "modes-" + tag)
    log = os.path.join(work, "modes-%s.log" % tag)
    argv = argv_for(sparrow, run_dir, mode, penalty, slow, size)
    rc, out, secs = rec.run(argv, size["duration"] + 90, log,
                            what="modes study: %s, penalty %s, %s" %
                            (mode, penalty, "trainer %d slowed %gx" % (SLOWED, slow) if slow
                             else "no straggler"))
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    st, ck = s.get("staleness") or {}, s.get("checkpoint") or {}
    ll, bll = _num(s.get("window_logloss")), _num(s.get("bayes_logloss"))
    per = s.get("per_trainer") or []
    ex_t = [_num(t.get("examples")) or 0.0 for t in per]
    drained = bool(s.get("drained"))
    row = {"mode": mode, "penalty": penalty, "slow": slow, "rc": rc,
           "ok": rc == 0 and bool(s.get("ok")) and drained, "drained": drained,
           "ex_per_s": _num(s.get("train_ex_per_s")) if drained else None,
           "window_logloss": ll, "window_auc": _num(s.get("window_auc")),
           "bayes_logloss": bll, "bayes_auc": _num(s.get("bayes_auc")),
           "gap_to_bayes": ll - bll if ll is not None and bll is not None else None,
           "tau_p50": _num(st.get("p50")), "tau_p99": _num(st.get("p99")),
           "tau_count": _num(st.get("count")),
           "tau_buckets": [[b, c] for b, c in st.get("buckets") or []],
           "pause_p50_s": _num(ck.get("pause_p50_s")), "pause_p99_s": _num(ck.get("pause_p99_s")),
           "examples_produced": _num(s.get("examples_produced")),
           "examples_trained": _num(s.get("examples_trained")),
           "trainer_examples": ex_t,
           "slowed_share": (ex_t[SLOWED] / sum(ex_t)) if len(ex_t) > SLOWED and sum(ex_t) > 0
           else None,
           "duration_s": _num(s.get("duration_s")), "wall_s": round(secs, 1),
           "series": series(os.path.join(run_dir, "samples.csv"))}
    if not row["ok"]:
        row["why"] = rl.launch_failure(out, rc, s, drained, size["duration"],
                                       "launch failed after draining (see its log)")
        with open(log, "a") as f:  # what the run's processes said last, kept with the results
            f.write("\n" + _tail(run_dir) + "\n")
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


def run(rec, sparrow, work, quick):
    size = SIZES[bool(quick)]
    modes = QUICK_MODES if quick else MODES
    stragglers = QUICK_STRAGGLERS if quick else STRAGGLERS
    rows, failures, skipped = [], [], []
    t0 = time.monotonic()
    for slow in stragglers:
        for mode, penalty in modes:
            name = "%s/%s/%s" % (mode, penalty, "%gx" % slow if slow else "none")
            if time.monotonic() - t0 > size["budget"]:
                skipped.append(name)
                continue
            rec.note("modes: %s" % name)
            r = one_run(rec, sparrow, work, mode, penalty, slow, size)
            rows.append(r)
            if not r["ok"]:
                failures.append("%s: %s" % (name, r["why"]))
    for r in rows:  # throughput against sync with the same straggler
        base = next((b for b in rows if b["mode"] == "sync" and b["slow"] == r["slow"] and
                     b["ok"]), None)
        r["ratio_vs_sync"] = (r["ex_per_s"] / base["ex_per_s"]
                              if base and r["ok"] and r["ex_per_s"] and base["ex_per_s"] else None)
    for name in skipped:
        failures.append("%s: not run, the study's time budget of %d s was spent" %
                        (name, size["budget"]))
    cmd = argv_for(sparrow, "$WORK/modes-TAG", "MODE", "PENALTY", 0, size)
    return {"examples": size["examples"], "partitions": size["partitions"],
            "duration": size["duration"], "budget": size["budget"], "trainers": TRAINERS,
            "shards": SHARDS, "slowed": SLOWED, "stragglers": stragglers,
            "modes": [list(m) for m in modes], "samples_ms": SAMPLES_MS,
            "window": size["examples"] // TRAINERS // 4, "stream": dict(rl.STREAM),
            "rows": rows, "failures": failures, "skipped": skipped,
            "command": " ".join(str(a) for a in cmd) + " [--slow %d:FACTOR]" % SLOWED}


if __name__ == "__main__":
    import tempfile
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    quick = "--quick" in sys.argv
    sparrow = os.path.join(sys.argv[1], "sparrow")
    with tempfile.TemporaryDirectory() as work:
        rec = rl.Recorder(log=lambda m: print(m, file=sys.stderr))
        print(json.dumps(run(rec, sparrow, work, quick), indent=1))
