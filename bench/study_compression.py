#!/usr/bin/env python3
"""Compression study (issue 9): bytes pushed per example against final-window logloss, for top-k
ratios 1.0 ... 0.001, fp32 and fp16 values, with and without error feedback. One `sparrow
trainer` process per variant with in-process shards, all on the studies' common stream (same
seeds). Ratio 1.0 sends every row, so error feedback has nothing to keep: it is run once per value
type and shared by both error-feedback lines.
Standalone: bench/study_compression.py BUILD_DIR [--quick]   (prints JSON)"""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402

RATIOS = [1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001]


def run(rec, sparrow, stream, n, work, quick):
    rows, failures = [], []
    window = max(1000, n // 4)
    for fp16 in (False, True):
        for ratio in RATIOS:
            for ef in ((True,) if ratio == 1.0 else (True, False)):
                extra = ["trainer.topk.ratio=%g" % ratio,
                         "trainer.push.fp16=%s" % ("true" if fp16 else "false"),
                         "trainer.error_feedback=%s" % ("true" if ef else "false")]
                argv = rl.trainer_argv(sparrow, stream, "inproc", window=window, extra=extra)
                log = os.path.join(work, "compression-%s-%g-%s.log" %
                                   ("fp16" if fp16 else "fp32", ratio, "ef" if ef else "noef"))
                rc, out, secs = rec.run(argv, 600, log, what="compression study")
                f = rl.finished(out)
                if rc != 0 or not f or f.get("status") != "success":
                    failures.append("%s: rc=%s %s" % (os.path.basename(log), rc,
                                                      out.strip().splitlines()[-1:] if out else ""))
                    continue
                row = {"fp16": fp16, "ratio": ratio, "ef": ef,
                       "step_bytes_per_example": rl.num(f.get("step_bytes_per_example")),
                       "bytes_per_example": rl.num(f.get("bytes_per_example")),
                       "window_logloss": rl.num(f.get("window_logloss")),
                       "window_auc": rl.num(f.get("window_auc")),
                       "bayes_logloss": rl.num(f.get("bayes_logloss")),
                       "ex_per_s": rl.num(f.get("ex_per_s")),
                       "rows_pushed": rl.num(f.get("rows_pushed")),
                       "examples": rl.num(f.get("examples"))}
                rows.append(row)
                if ratio == 1.0:  # the same run stands for "without error feedback"
                    rows.append(dict(row, ef=False, shared=True))
    return {"examples": n, "window": window, "model": "fm k=8, batch 512, in-process shard",
            "rows": rows, "failures": failures,
            "command": " ".join(map(str, rl.trainer_argv(
                sparrow, stream, "inproc", window=window,
                extra=["trainer.topk.ratio=R", "trainer.push.fp16=F",
                       "trainer.error_feedback=E"])))}


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
