#!/usr/bin/env python3
"""Staleness-control study (issue 9): K concurrent `sparrow trainer` processes (K = 1, 7, 27, 107),
each with an injected delay before every step (trainer.debug.delay_ms) and each reading its own
part of the studies' common stream (dealt in micro-batch blocks, so every part spans the whole
stream), push to one `sparrow pserver` shard; the shard's penalty is none, inverse or exp:0.5.
tau (row version now minus row version pulled, per pushed row) is what the shard measured: its
sparrow_ps_staleness histogram, read from /metrics at the end of each run. Logloss is the mean of
the trainers' final-window logloss (windows of a quarter of each part: the last quarter of the
stream). Standalone: bench/study_staleness.py BUILD_DIR [--quick]   (prints JSON)"""

import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402

# Chosen for a measured tau of about 0, 4, 16 and 64: on 2 cores tau's mean came out at about
# 0.6 K (0.42, 2.1, 9.6, 38.5 for K = 1, 4, 16, 64; 4.1, 16.5, 63.2 for K = 7, 27, 107).
WRITERS = [1, 7, 27, 107]
PENALTIES = ["none", "inverse", "exp:0.5"]
DELAY_MS = 2
BATCH = 512


def one_run(rec, sparrow, parts, penalty, work, window, tag):
    data_dir = os.path.join(work, "st-ps-" + tag)
    ps = rl.Pserver(rec, sparrow, data_dir, 9, settings=["pserver.staleness.penalty=" + penalty],
                    memory_mb=1024, log_path=os.path.join(work, "st-ps-%s.log" % tag))
    procs = []
    t0 = time.monotonic()
    try:
        for i, part in enumerate(parts):
            argv = rl.trainer_argv(sparrow, part, ps.endpoint, batch=BATCH, window=window,
                                   extra=["trainer.id=%d" % (i + 1),
                                          "trainer.debug.delay_ms=%d" % DELAY_MS])
            log = os.path.join(work, "st-%s-t%d.log" % (tag, i))
            procs.append((rl.spawn(argv, log), log, argv))
        res = []
        for p, log, argv in procs:
            rc, _ = rl.wait_rusage(p, max(30, 600 - (time.monotonic() - t0)))
            with open(log, errors="replace") as fh:
                res.append((rc, rl.finished(fh.read())))
        secs = time.monotonic() - t0
        rec.record(procs[0][2], None if any(r[0] is None for r in res) else
                   max(abs(r[0]) for r in res), secs,
                   "staleness study: %d such trainers (trainer.id=1..%d, one part each)" %
                   (len(parts), len(parts)))
        buckets, tsum, tcount = rl.histogram(ps.metrics(), "sparrow_ps_staleness")
    finally:
        for p, _, _ in procs:
            if p.poll() is None and p.returncode is None:
                rl.kill_group(p)
        ps.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    bad = [r for r in res if r[0] != 0 or not r[1] or r[1].get("status") != "success"]
    if bad:
        raise RuntimeError("%d of %d trainers failed" % (len(bad), len(res)))
    fs = [r[1] for r in res]
    mean = lambda key: sum(rl.num(f.get(key), 0.0) for f in fs) / len(fs)  # noqa: E731
    examples = sum(rl.num(f.get("examples"), 0.0) for f in fs)
    zero = dict(buckets).get(0.0)
    return {"window_logloss": mean("window_logloss"), "window_auc": mean("window_auc"),
            "bayes_logloss": mean("bayes_logloss"), "const_logloss": mean("const_logloss"),
            "examples": examples, "ex_per_s": examples / secs if secs > 0 else None,
            "seconds": secs,
            "tau_mean": tsum / tcount if tcount else None, "tau_rows": tcount,
            "tau_zero_frac": zero / tcount if tcount and zero is not None else None,
            "tau_p50": rl.hist_quantile(buckets, 0.5), "tau_p90": rl.hist_quantile(buckets, 0.9),
            "tau_p99": rl.hist_quantile(buckets, 0.99),
            "tau_buckets": [[("+Inf" if b == float("inf") else b), c] for b, c in buckets]}


def run(rec, sparrow, stream, n, work, quick):
    rows, failures = [], []
    for k in WRITERS:
        parts = [stream] if k == 1 else rl.split_pb(stream, k, BATCH,
                                                    os.path.join(work, "part-k%d" % k))
        window = max(256, n // k // 4)
        for pen in PENALTIES:
            tag = "k%d-%s" % (k, pen.replace(":", ""))
            rec.note("staleness: %d writers, penalty %s" % (k, pen))
            try:
                r = one_run(rec, sparrow, parts, pen, work, window, tag)
            except (RuntimeError, OSError) as e:
                failures.append("%s: %s" % (tag, e))
                continue
            r.update({"writers": k, "penalty": pen, "window": window})
            rows.append(r)
        if k > 1:
            for p in parts:
                os.unlink(p)
    return {"examples": n, "writers": WRITERS, "penalties": PENALTIES, "delay_ms": DELAY_MS,
            "batch": BATCH, "model": "fm k=8, one sparrow pserver shard on loopback",
            "rows": rows, "failures": failures,
            "command": " ".join(map(str, rl.trainer_argv(
                sparrow, "PART", "tcp://127.0.0.1:PORT", batch=BATCH, window="W",
                extra=["trainer.id=I", "trainer.debug.delay_ms=%d" % DELAY_MS])))}


if __name__ == "__main__":
    import json
    import tempfile
    quick = "--quick" in sys.argv
    sparrow = os.path.join(sys.argv[1], "sparrow")
    with tempfile.TemporaryDirectory() as work:
        rec = rl.Recorder(log=lambda m: print(m, file=sys.stderr))
        n = 200000 if quick else 1000000
        stream = os.path.join(work, "stream.pb")
        rl.gen_stream(rec, sparrow, stream, n, os.path.join(work, "gen.log"))
        print(json.dumps(run(rec, sparrow, stream, n, work, quick), indent=1))
