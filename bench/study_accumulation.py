#!/usr/bin/env python3
"""Gradient-accumulation study (issue 9): acc_steps 1, 2, 4, 8 at a fixed micro-batch against one
large batch of 8 micro-batches (acc_steps 1): peak resident memory of the trainer process (its own
rusage, from wait4: the shard is a separate `sparrow pserver` process, started fresh for every
run), examples/s and final-window logloss, on the studies' common stream.
Standalone: bench/study_accumulation.py BUILD_DIR [--quick]   (prints JSON)"""

import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402

MICRO = 1024


def run(rec, sparrow, stream, n, work, quick):
    window = max(1000, n // 4)
    # pipelined pulls on (the default), and the two 8-micro-batch ways once more without them: a
    # prefetched pull misses the push of the step before it, which costs one batch of 8192 a
    # whole step and acc_steps 8 only its first micro-batch
    variants = [(MICRO, a, True) for a in (1, 2, 4, 8)] + [(MICRO * 8, 1, True),
                                                           (MICRO, 8, False), (MICRO * 8, 1, False)]
    rows, failures = [], []
    for batch, acc, prefetch in variants:
        name = "b%d-acc%d%s" % (batch, acc, "" if prefetch else "-noprefetch")
        data_dir = os.path.join(work, "acc-ps-" + name)
        try:
            ps = rl.Pserver(rec, sparrow, data_dir, 9, memory_mb=1024,
                            log_path=os.path.join(work, "acc-ps-%s.log" % name))
        except RuntimeError as e:
            failures.append("%s: %s" % (name, e))
            continue
        argv = rl.trainer_argv(sparrow, stream, ps.endpoint, batch=batch, window=window,
                               extra=["trainer.acc_steps=%d" % acc,
                                      "trainer.pull.prefetch=%s" % str(prefetch).lower()])
        log = os.path.join(work, "acc-%s.log" % name)
        t0 = time.monotonic()
        p = rl.spawn(argv, log)
        rc, maxrss_kb = rl.wait_rusage(p, 600)
        rec.record(argv, rc, time.monotonic() - t0, "accumulation study")
        ps.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        with open(log, errors="replace") as fh:
            f = rl.finished(fh.read())
        if rc != 0 or not f or f.get("status") != "success":
            failures.append("%s: rc=%s" % (name, rc))
            continue
        rows.append({"batch": batch, "acc_steps": acc, "step_examples": batch * acc,
                     "prefetch": prefetch,
                     "max_rss_mib": maxrss_kb / 1024.0,
                     "ex_per_s": rl.num(f.get("ex_per_s")),
                     "window_logloss": rl.num(f.get("window_logloss")),
                     "window_auc": rl.num(f.get("window_auc")),
                     "bayes_logloss": rl.num(f.get("bayes_logloss")),
                     "steps": rl.num(f.get("steps"))})
    return {"examples": n, "window": window, "micro_batch": MICRO,
            "model": "fm k=8, one sparrow pserver shard on loopback",
            "rows": rows, "failures": failures,
            "command": " ".join(map(str, rl.trainer_argv(
                sparrow, stream, "tcp://127.0.0.1:PORT", batch="B", window=window,
                extra=["trainer.acc_steps=A", "trainer.pull.prefetch=P"])))}


if __name__ == "__main__":
    import json
    import tempfile
    quick = "--quick" in sys.argv
    sparrow = os.path.join(sys.argv[1], "sparrow")
    with tempfile.TemporaryDirectory() as work:
        rec = rl.Recorder()
        n = 200000 if quick else 1000000
        stream = os.path.join(work, "stream.pb")
        rl.gen_stream(rec, sparrow, stream, n, os.path.join(work, "gen.log"))
        print(json.dumps(run(rec, sparrow, stream, n, work, quick), indent=1))
