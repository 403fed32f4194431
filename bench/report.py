#!/usr/bin/env python3
"""Writes docs/BENCHMARKS.md (and its PNG plots, with gnuplot) from the results.json of
bench/run_all. Every number in the report is read from the benchmarks' printed output or the
studies' measurements; where a benchmark did not run or its output lacks a figure, the table says
so. The prose of "How to choose" and "Sizing" is filled in from the same numbers.
usage: bench/report.py RESULTS_DIR [--out FILE]   (rewrites the report without running anything)"""

import csv
import io
import math
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib as rl  # noqa: E402


def f0(x):
    return "—" if x is None else "{:,.0f}".format(x)


def f2(x):
    return "—" if x is None else "{:.2f}".format(x)


def f4(x):
    return "—" if x is None else "{:.4f}".format(x)


def sgn4(x):
    return "—" if x is None else "{:+.4f}".format(x)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


# ---- component benchmarks against their targets ------------------------------------------------

NUM = r"([\d][\d,]*\.?\d*)"

# (component, label, target text, regex with the figure in group 1, test of the figure)
TARGETS = [
    ("gen", "gen: pb examples/s of the generator thread (to /dev/null)", ">= 500,000",
     r"gen_bench target pb_devnull_examples_per_s>=\d+ got=(\d+)", lambda v: v >= 500000),
    ("pserver", "pserver (b)/(a): row store vs flat-array Adagrad", ">= 0.5",
     r"b/a = " + NUM, lambda v: v >= 0.5),
    ("pserver", "pserver: resident bytes per DRAM row (payload 128 B)",
     "<= 190.4 (1.3 x payload + 24)",
     r"resident per DRAM row\s+" + NUM + " bytes", lambda v: v <= 190.4),
    ("pserver", "pserver (b)/(c): row store vs RocksDB get+put", ">= 20",
     r"b/c = " + NUM, lambda v: v >= 20),
    ("pserver", "pserver (d)/(b): ZeroMQ push vs in-process row store", ">= 0.25",
     r"d/b = " + NUM, lambda v: v >= 0.25),
    ("pserver", "pserver (d): ZeroMQ push vs a raw ZeroMQ DEALER/ROUTER pair, same bytes",
     ">= 0.5", r"sparrow pserver.*?vs raw ZeroMQ pair \d+ rows/s: " + NUM, lambda v: v >= 0.5),
    ("pserver", "pserver (d): ZeroMQ pull vs a raw ZeroMQ DEALER/ROUTER pair, same bytes",
     ">= 0.5", r"ZeroMQ pull .*?vs raw ZeroMQ pair \d+ rows/s: " + NUM, lambda v: v >= 0.5),
    ("pserver", "pserver (d): first push of a key over ZeroMQ (row created, Adagrad applied), "
     "rows/s", ">= 3,000,000", r"ZeroMQ push, rows created\s+" + NUM + " rows/s",
     lambda v: v >= 3000000),
    ("pserver", "pserver (e)/(b): model 10x the DRAM budget", ">= 0.1",
     r"e/b = " + NUM, lambda v: v >= 0.1),
    ("pserver", "pserver (e)/(b), pulled then pushed as a trainer does", ">= 0.1",
     r"\(e\) pull then push\s+\d+ rows/s\s+vs \(b\) pull then push: " + NUM,
     lambda v: v >= 0.1),
    ("pserver", "pserver (e)/(b), pushes and pulls-then-pushes with the checkpoint's flush of "
     "their dirty rows charged", ">= 0.1", r"flush charged = " + NUM, lambda v: v >= 0.1),
    ("pserver", "pserver (f): checkpoint MB/s vs dd", ">= 0.3",
     r"f/dd = " + NUM, lambda v: v >= 0.3),
    ("ingest", "ingest JSON (39 features): ingest / bare consume", ">= 0.5",
     r"json.*?ratio " + NUM, lambda v: v >= 0.5),
    ("ingest", "ingest protobuf: events/s", ">= 300,000",
     r"protobuf.*?ingest\s+" + NUM + " events/s", lambda v: v >= 300000),
    ("http_slowloris", "serve: valid predictions answered within 100 ms with 2,000 slow "
     "connections open, % (--quick: 300)", ">= 99",
     r"target >= 99% of valid predictions within 100 ms with \d+ slow connections open: "
     r"([\d.]+)%", lambda v: v >= 99),
    ("http_slowloris", "serve: p99 latency with the slow connections open / with none", "(no target)",
     r"p99 slow/baseline ([\d.]+)", None),
    ("pipeline", "whole pipeline (launch, 2 shards, 4 trainers, async) / one trainer with an "
     "in-process shard, examples/s, same stream, same run", ">= 0.7",
     r"pipeline/one-trainer examples/s " + NUM, lambda v: v >= 0.7),
]
for _m in ("fm", "lr"):
    TARGETS += [
        ("trainer",
         "trainer %s: (b) in-process shard / (a) reference loop, examples/s" % _m.upper(),
         ">= 0.7", r"== ratios, %s.*?b/a examples/s\s+%s" % (_m, NUM), lambda v: v >= 0.7),
        ("trainer", "trainer %s: (c) sparrow pserver / (a) reference loop, examples/s" % _m.upper(),
         ">= 0.35", r"== ratios, %s.*?c/a examples/s\s+%s" % (_m, NUM), lambda v: v >= 0.35),
        ("trainer", "trainer %s: final-window logloss (b) vs (a), %%" % _m.upper(), "within ±1%",
         r"== ratios, %s.*?logloss b vs a\s+(-?[\d.]+)%%" % _m, lambda v: abs(v) <= 1.0),
        ("trainer", "trainer %s: final-window logloss (c) prefetch with fresh reads vs (c0) no "
         "prefetch, %%" % _m.upper(), "<= +0.2%",
         r"== ratios, %s.*?logloss c vs c0\s+(-?[\d.]+)%%" % _m, lambda v: v <= 0.2),
        ("trainer", "trainer %s: (c) with fresh reads / (c1) without, examples/s" % _m.upper(),
         ">= 0.95", r"== ratios, %s.*?c/c1 examples/s\s+%s" % (_m, NUM), lambda v: v >= 0.95),
        ("trainer", "trainer %s: >= 10x fewer bytes for <= +0.002 logloss (error feedback); "
         "without it visibly worse" % _m.upper(), "met at some ratio",
         r"== ratios, %s.*?with error feedback: (MET at ratio [\d.]+|MISSED)" % _m, None),
    ]

# issue 20 section 3: trainer.threads, one process, in-process shard, same run
for _m, _label in (("fm", "FM k=16"), ("deepfm", "DeepFM k=16 (MLP 400,400)")):
    TARGETS += [
        ("trainer", "trainer %s, in-process shard: 2 compute threads / 1 (trainer.threads), "
         "examples/s, same run" % _label, ">= 1.7 (2 cores)",
         r"== compute threads.*?%s threads 2/1 examples/s\s+%s" % (_m, NUM), lambda v: v >= 1.7),
        ("trainer", "trainer %s: final-window logloss, 2 threads minus 1" % _label,
         "(no target: equal up to float order)",
         r"== compute threads.*?%s logloss threads 2 vs 1 (-?[\d.e-]+)" % _m, None),
    ]


def serve_rows(c):
    """serve_bench's rows: its held-rate-while-training and freshness verdicts when it prints them
    (the issue 7 conditions), else the closed-loop figures of its older form, said to be so."""
    out, status = c.get("output", ""), c.get("status", "not run")
    t_lat = "p99 <= 10 ms at 2,000 single-example req/s while training runs"
    t_fresh = "p99 <= 1 s with the 250 ms publish interval"
    rows = []
    suffix = "" if status == "ok" else " (run %s)" % status
    m = re.search(r"target p99 <= 10 ms at (\d+) single req/s while training: achieved ([\d.]+) "
                  r"req/s, p99 ([\d.]+) ms -> (met|MISSED)", out)
    if m:
        rows.append(("serve: single-example requests held at %s req/s while the demo trains" %
                     m.group(1), "%s req/s achieved, p99 %s ms" % (f0(rl.num(m.group(2))),
                                                                    m.group(3)),
                     t_lat, ("yes" if m.group(4) == "met" else "**no**") + suffix))
    else:
        m = re.search(r"^single: (\d+) requests/s p50 ([\d.]+) ms p99 ([\d.]+) ms", out, re.M)
        if m:
            ok = float(m.group(1)) >= 2000 and float(m.group(3)) <= 10
            rows.append(("serve: single-example requests, wrk closed loop, no training running",
                         "%s req/s, p99 %s ms" % (f0(rl.num(m.group(1))), m.group(3)), t_lat,
                         ("yes" if ok else "**no**") + " (not the target's condition: "
                         "no training ran)" + suffix))
        else:
            rows.append(("serve: single-example p99 while training runs",
                         status if status != "ok" else "not in the output", t_lat, "—"))
    m = re.search(r"target freshness p99 <= (?:3 s \(1 s|1 s \(\d+ ms) publish interval\): p99 ([\d.na]+) s"
                  r"(?: over (\d+) updates)? -> (met|MISSED)", out)
    if m:
        rows.append(("serve: freshness p99, event time to visible in serving", m.group(1) + " s" +
                     (" (%s updates)" % f0(int(m.group(2))) if m.group(2) else ""),
                     t_fresh, ("yes" if m.group(3) == "met" else "**no**") + suffix))
    elif "NOT MEASURED, no update reached serve" in out:
        rows.append(("serve: freshness p99, event time to visible in serving",
                     "not measured: no update reached serve", t_fresh, "**no**"))
    else:
        rows.append(("serve: freshness p99, event time to visible in serving",
                     status if status not in ("ok",) else "not measured by this serve_bench",
                     t_fresh, "—"))
    # issue 20 §5: a batch's own latency, the single-example rate against /healthz of the same
    # run, and held rates while training runs
    m = re.search(r"target batch64 p99 <= 2 ms, idle, one connection: p99 ([\d.]+) ms \(p50 "
                  r"([\d.]+) ms\) -> (met|MISSED)", out)
    if m:
        rows.append(("serve: batch of 64 examples (39 features each), idle, one connection",
                     "p99 %s ms (p50 %s ms)" % (m.group(1), m.group(2)), "p99 <= 2 ms",
                     ("yes" if m.group(3) == "met" else "**no**") + suffix))
    m = re.search(r"target single req/s vs healthz >= 0.8 \(closed loop, same run\): ([\d.]+) "
                  r"\(([\d.]+) / ([\d.]+) req/s\) -> (met|MISSED)", out)
    if m:
        rows.append(("serve: single-example req/s / GET /healthz req/s, closed loop, same run",
                     "%s (%s / %s req/s)" % (m.group(1), f0(rl.num(m.group(2))),
                                             f0(rl.num(m.group(3)))), ">= 0.8",
                     ("yes" if m.group(4) == "met" else "**no**") + suffix))
    for m in re.finditer(r"held (\d+) single req/s while training: achieved ([\d.]+) req/s, p50 "
                         r"([\d.]+) ms, p99 ([\d.]+) ms, errors (\d+)", out):
        fig = "%s req/s achieved, p50 %s ms, p99 %s ms, %s errors" % (
            f0(rl.num(m.group(2))), m.group(3), m.group(4), m.group(5))
        same = [i for i, r in enumerate(rows) if r[0] == "serve: single-example requests held at "
                "%s req/s while the demo trains" % m.group(1)]
        if same:  # the issue 7 target's row: give it the p50 too
            rows[same[0]] = (rows[same[0]][0], fig) + rows[same[0]][2:]
            continue
        rows.append(("serve: single-example requests held at %s req/s while the demo trains" %
                     f0(rl.num(m.group(1))),
                     "%s req/s achieved, p50 %s ms, p99 %s ms, %s errors" %
                     (f0(rl.num(m.group(2))), m.group(3), m.group(4), m.group(5)),
                     "(measured; no target)", "n/a"))
    for kind, label in (("single", "single example of 39 features"), ("batch64", "batch of 64")):
        m = re.search(r"idle %s: ([\d.]+) req/s p50 ([\d.]+) ms p99 ([\d.]+) ms" % kind, out)
        if m:
            rows.append(("serve, idle (closed loop): %s" % label,
                         "%s req/s, p50 %s ms, p99 %s ms" % (f0(rl.num(m.group(1))), m.group(2),
                                                            m.group(3)), "(no target)", "n/a"))
    return rows


def component_rows(res):
    rows, rates = [], {}
    comps = res.get("components", {})
    for comp, label, target, rx, test in TARGETS:
        c = comps.get(comp, {})
        status = c.get("status", "not run")
        out = c.get("output", "")
        if rx is None:
            rows.append((label, "not measured by %s_bench" % comp, target, "n/a"))
            continue
        m = re.search(rx, out, re.S) if out else None
        if m:
            fig = m.group(1)
            v = rl.num(fig)
            if re.fullmatch(r"\d{4,}", fig):
                fig = f0(v)
            if test is None:
                if fig.startswith("MET"):
                    ok = "yes" if re.search(r"with error feedback: MET.*?\((MET)\)",
                                            out[m.start():], re.S) else \
                        "half: fewer bytes met, the run without error feedback not visibly worse"
                elif fig == "MISSED":
                    ok = "**no**"
                elif comp == "serve":
                    p99 = re.search(r"single: \d+ requests/s p50 [\d.]+ ms p99 ([\d.]+) ms", out)
                    ok = ("yes at saturation, without training" if v >= 2000 and p99 and
                          float(p99.group(1)) <= 10 else "**no** (at saturation, without training)")
                else:
                    ok = "n/a"
            else:
                ok = "yes" if test(v) else "**no**"
            if status != "ok":
                ok += " (run %s)" % status
            rows.append((label, fig, target, ok))
        else:
            why = status if status != "ok" else "not in the output"
            rows.append((label, why, target, "—"))
    rows += serve_rows(comps.get("serve", {}))
    # the per-process rates of the sizing section
    t = comps.get("trainer", {}).get("output", "")
    m = re.search(r"^\s+fm\.c\s+examples/s\s+(\d+)", t, re.M)
    rates["trainer"] = rl.num(m.group(1)) if m else None
    p = comps.get("pserver", {}).get("output", "")
    m = re.search(r"\(d\) ZeroMQ push to sparrow pserver\s+(\d+) rows/s", p)
    rates["push"] = rl.num(m.group(1)) if m else None
    m = re.search(r"ZeroMQ pull\s+(\d+) rows/s", p)
    rates["pull"] = rl.num(m.group(1)) if m else None
    m = re.search(r"resident per DRAM row\s+([\d.]+) bytes", p)
    rates["row_bytes"] = rl.num(m.group(1)) if m else None
    i = comps.get("ingest", {}).get("output", "")
    m = re.search(r"protobuf.*?ingest\s+([\d,]+) events/s", i)
    rates["ingest"] = rl.num(m.group(1)) if m else None
    s = comps.get("serve", {}).get("output", "")
    m = re.search(r"idle single: ([\d.]+) req/s", s) or re.search(r"^single: (\d+) requests/s", s,
                                                                   re.M)
    rates["serve"] = rl.num(m.group(1)) if m else None
    return rows, rates


# ---- plots -------------------------------------------------------------------------------------

class Plots:
    def __init__(self, out_dir, rel_dir):
        self.dir, self.rel, self.errors = out_dir, rel_dir, []
        os.makedirs(out_dir, exist_ok=True)

    def plot(self, name, script, data):
        """data: {file name: text}; script refers to them by name. Returns the markdown image
        reference, or a line saying the plot failed (a failed plot never fails the run)."""
        for fn, text in data.items():
            with open(os.path.join(self.dir, fn), "w") as f:
                f.write(text)
        png = name + ".png"
        full = ("set terminal pngcairo noenhanced size 900,540 font ',10'\n"
                "set output '%s'\n" % png) + script
        try:
            r = subprocess.run(["gnuplot"], input=full, text=True, capture_output=True,
                               cwd=self.dir, timeout=60)
            ok = r.returncode == 0 and os.path.exists(os.path.join(self.dir, png))
            err = r.stderr.strip()[-300:]
        except (OSError, subprocess.SubprocessError) as e:
            ok, err = False, str(e)
        finally:
            for fn in data:
                try:
                    os.unlink(os.path.join(self.dir, fn))
                except OSError:
                    pass
        if not ok:
            self.errors.append("%s: %s" % (name, err))
            return "*(plot %s not drawn: %s)*" % (name, err or "gnuplot failed")
        return "![%s](%s/%s)" % (name, self.rel, png)


# ---- sections ----------------------------------------------------------------------------------

def header(res):
    m = res["machine"]
    lines = ["# Sparrow benchmarks", ""]
    if res.get("quick"):
        lines += ["> **Smoke run (`bench/run_all --quick`)**: every benchmark and study at small "
                  "sizes, to show that they run to the end and produce their tables. Its figures "
                  "say nothing about Sparrow's speed or model quality; the committed report comes "
                  "from a full run (`make bench`) on a quiet machine.", ""]
    lines += ["Generated by `%s` on %s, commit `%s`%s, in %.0f s." %
              (res.get("argv", "bench/run_all"), res["date"], m.get("git", "?"),
               " (with uncommitted changes)" if m.get("git_dirty") else "", res.get("seconds", 0))]
    la, lb = m.get("load_start"), m.get("load_end")
    if la and lb:
        # judged at the start: at the end the 1-minute load is the benchmarks' own
        lines += ["", "Load average (1/5/15 min) at the start %s (%s), at the end %s (the "
                  "benchmarks' own processes)." %
                  ("/".join("%.2f" % x for x in la),
                   "other work was running on the machine, so rates are lower and noisier than "
                   "on a quiet one" if la[0] > 0.5 * max(1, int(m.get("nproc") or 1))
                   else "the machine was quiet", "/".join("%.2f" % x for x in lb))]
    if res.get("note"):
        lines += ["", "**Note:** " + res["note"]]
    lines += ["", "## Machine", "", "```", "nproc: %s" % m.get("nproc"),
              "memory: %s" % m.get("memory"), "os: %s, kernel %s" % (m.get("os"), m.get("kernel")),
              "compiler: %s" % m.get("compiler"), m.get("lscpu", ""), "```", ""]
    return lines


def components_section(res, rows):
    lines = ["## Component benchmarks against their targets", "",
             "From the benchmarks of issues 2–7 (each prints its figures as ratios against a "
             "baseline measured in the same run; their full output is at the end). *met* is "
             "judged on the figure as printed.", ""]
    st = []
    for name, c in res.get("components", {}).items():
        st.append("`%s`: %s%s" % (name, c.get("status", "not run"),
                                  " (%.0f s)" % c["secs"] if "secs" in c else ""))
    lines += ["Runs: " + "; ".join(st) + ".", ""]
    lines += [table(["benchmark", "figure as measured", "target", "met?"], rows), ""]
    return lines


def _cell(v):
    """A CSV value for a table: numbers rounded for reading, the rest as written."""
    x = rl.num(v)
    if x is None or not v.strip() or v.strip().lower() in ("nan", "inf"):
        return v
    if float(x).is_integer() and abs(x) < 1e15:
        return "{:,.0f}".format(x) if abs(x) >= 10000 else "%d" % x
    return "{:,.0f}".format(x) if abs(x) >= 1000 else "%.4g" % x


def parse_csv(text):
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return None, None
    rows = [r for r in rows if r]
    return (rows[0], rows[1:]) if rows else (None, None)


def stream_section(res):
    st = res.get("stream")
    if not st:
        return []
    sm = st.get("summary", {})
    return ["## The studies' common stream", "",
            "`sparrow gen --n %s --seed %s --fields %s --set gen.drift=%s --set gen.vocab.max=%s`:"
            " %s examples, click rate %s, Bayes-optimal logloss %s and AUC %s over the whole "
            "stream (the planted model, drifting %s rad per million examples). Every study "
            "below trains on this file (or on parts of it) with the same seeds." %
            (st.get("examples"), st.get("seed"), st.get("fields"), st.get("drift"),
             st.get("vocab_max"), f0(st.get("examples")), sm.get("ctr", "?"),
             sm.get("bayes_logloss", "?"), sm.get("bayes_auc", "?"), st.get("drift")), ""]


def _slow_label(slow):
    return "trainer %d at %gx" % (MODES_SLOWED, slow) if slow else "none"


MODES_SLOWED = 3
# ten distinct line colours (gnuplot's default cycle repeats after eight)
MODES_COLOURS = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#c8b400", "#0072b2", "#e51e10",
                 "#000000", "#ff69b4", "#8b4513"]


def _mode_label(r):
    return r["mode"] + ("/" + r["penalty"] if r["mode"] == "async" else "")


def _tau_bins(buckets):
    """Per-bucket fractions [(label, fraction)] of a cumulative staleness histogram
    [[bound or "+Inf", count], ...]."""
    out, prev_b, prev_c = [], None, 0.0
    total = buckets[-1][1] if buckets else 0
    for b, c in buckets:
        b = float("inf") if b == "+Inf" else float(b)
        if prev_b is None:
            lab = "%g" % b
        elif b == float("inf"):
            lab = ">%g" % prev_b
        elif b == prev_b + 1:
            lab = "%g" % b
        else:
            lab = "%g-%g" % (prev_b + 1, b)
        out.append((lab, (c - prev_c) / total if total else 0.0))
        prev_b, prev_c = b, c
    return out


def modes_section(res, plots):
    st = res.get("studies", {}).get("modes") or {}
    lines = ["## Modes: sync, async, SSP, hybrid, with stragglers", ""]
    status = st.get("status", "not run")
    if st.get("rows") is None or status.startswith("not run"):
        lines += [table(["mode", "penalty", "straggler", "result"], [("—", "—", "—", status)]),
                  ""]
        return lines, {"study": st}
    smp = st.get("stream", {})
    lines += ["Each configuration is one `sparrow launch` run (bench/study_modes.py): %s CPU "
              "trainers (FM k=4, batch 256), %s shards, the coordinator and the Kafka mock (%s "
              "partitions) on loopback. The generator produces the same %s examples every time "
              "(seed %s, %s fields, drift %s rad/M, vocabulary up to %s: the studies' stream "
              "settings) before the trainers start, so the trainers set the pace; a run ends when "
              "the coordinator's checkpoint counts all of them (checkpoints every 5 s), or fails "
              "after %s s. The straggler is trainer %s slowed by `trainer.debug.slow_factor` (2x, "
              "4x). examples/s: the examples trained between the first 100 ms sample that saw any "
              "and the first that saw all, over that time; *vs sync*: against `sync` with the "
              "same straggler. Logloss and AUC: the mean over the trainers of their final window "
              "(their last %s examples each); *gap to Bayes*: that minus the Bayes-optimal "
              "logloss of the same windows (the generator's planted model). tau: the shards' "
              "`sparrow_ps_staleness` histogram (row version at push minus at pull, per pushed "
              "row), as the bucket bounds holding p50/p99; checkpoint pause: the trainers' "
              "histogram, bucket bounds. *slowed share*: the part of the examples trainer %s "
              "trained (1/%s without a straggler, if partitions are dealt evenly). Penalties "
              "other than async's are the shards' `inverse`. Every configuration ran once: no "
              "repeat measures the run-to-run noise." %
              (st.get("trainers"), st.get("shards"), st.get("partitions"), f0(st.get("examples")),
               smp.get("seed"), smp.get("fields"), smp.get("drift"), f0(smp.get("vocab_max")),
               st.get("duration"), st.get("slowed"), f0(st.get("window")), st.get("slowed"),
               st.get("trainers")), "",
              "Per run: `%s`." % _rel(res, st.get("command", "")), "",
              "Study status: %s (%.0f s)." % (status, st.get("secs", 0)), ""]
    rows = st["rows"]
    t = []
    for r in rows:
        t.append((r["mode"], r["penalty"], _slow_label(r["slow"]), f0(r["ex_per_s"]),
                  f2(r.get("ratio_vs_sync")), f4(r["window_logloss"]), f4(r["window_auc"]),
                  sgn4(r["gap_to_bayes"]),
                  "%s / %s" % tuple("%g" % q if q is not None else "—"
                                    for q in (r["tau_p50"], r["tau_p99"])),
                  "%s / %s" % tuple("%g" % q if q is not None else "—"
                                    for q in (r["pause_p50_s"], r["pause_p99_s"])),
                  f2(r.get("slowed_share")),
                  "yes" if r["ok"] else "**no**: " + r.get("why", "")))
    lines += [table(["mode", "penalty", "straggler", "examples/s", "vs sync", "window logloss",
                     "AUC", "gap to Bayes", "tau p50 / p99", "ckpt pause p50 / p99 (s)",
                     "slowed share", "drained"], t), ""]
    if st.get("failures"):
        lines += ["Failed or skipped runs (a run that did not drain has no examples/s; its other "
                  "figures are those it had when it stopped): " + "; ".join(st["failures"]), ""]
    slows = sorted(set(r["slow"] for r in rows))
    shown = sorted(set((slows[0], slows[-1]))) if slows else []
    if shown:
        lines += ["The plots, for %s: the trainers' mean window logloss (sampled every %s ms from "
                  "their /metrics, samples.csv) against the examples all trainers had trained by "
                  "then (a trainer's window holds its last %s examples, fewer before it has seen "
                  "that many), and the staleness histogram as the fraction of pushed rows per "
                  "bucket." % (" and ".join("straggler " + _slow_label(x) for x in shown),
                               st.get("samples_ms", "?"), f0(st.get("window"))), ""]
    bayes = [r["bayes_logloss"] for r in rows if r.get("bayes_logloss")]
    order = [tuple(m) for m in st.get("modes") or []]

    def colour(r):  # the same colour for a mode in every plot
        k = (r["mode"], r["penalty"])
        return MODES_COLOURS[(order.index(k) if k in order else 0) % len(MODES_COLOURS)]

    for slow in shown:
        data, script = {}, []
        for i, r in enumerate(x for x in rows if x["slow"] == slow):
            if not r.get("series"):
                continue
            fn = "modes_ll_%g_%d.dat" % (slow, i)
            data[fn] = "".join("%g %g\n" % (p[0], p[1]) for p in r["series"])
            script.append("'%s' using 1:2 with lines lw 2 lc rgb '%s' title '%s%s'" %
                          (fn, colour(r), _mode_label(r), "" if r["ok"] else " (not drained)"))
        if script:
            extra = (", %g with lines dt 2 lc rgb 'gray' title 'Bayes-optimal (mean)'" %
                     (sum(bayes) / len(bayes))) if bayes else ""
            top = max(p[1] for r in rows if r["slow"] == slow for p in r.get("series") or [])
            clip = top > 1.0  # an early diverging line would flatten every other one
            lines += [plots.plot("modes_logloss_%s" % ("none" if not slow else "slow%g" % slow),
                                 "set xlabel 'examples seen (all trainers)'\nset ylabel 'window "
                                 "logloss (mean over trainers)'\nset grid\nset key outside "
                                 "right\nset yrange [*:%s]\nset title 'Modes: logloss against "
                                 "examples seen, straggler: %s%s'\nplot %s%s\n" %
                                 ("1" if clip else "*", _slow_label(slow),
                                  " (clipped at 1.0)" if clip else "", ", ".join(script),
                                  extra), data), ""]
    for slow in shown:
        hist = [(r, _tau_bins(r.get("tau_buckets") or [])) for r in rows if r["slow"] == slow]
        hist = [(r, h) for r, h in hist if h]
        if not hist:
            continue
        last = max(max((i for i, (_, v) in enumerate(h) if v > 0), default=0) for _, h in hist)
        data, script = {}, []
        for i, (r, h) in enumerate(hist):
            fn = "modes_tau_%g_%d.dat" % (slow, i)
            data[fn] = "".join('"%s" %g\n' % (lab, v) for lab, v in h[:last + 1])
            script.append("'%s' using 0:2:xtic(1) with linespoints lw 2 lc rgb '%s' title '%s'" %
                          (fn, colour(r), _mode_label(r)))
        lines += [plots.plot("modes_tau_%s" % ("none" if not slow else "slow%g" % slow),
                             "set xlabel 'tau (bucket of the shards'' histogram)'\nset ylabel "
                             "'fraction of pushed rows'\nset grid\nset key outside right\n"
                             "set yrange [0:*]\nset title 'Modes: staleness histogram, "
                             "straggler: %s'\nplot %s\n" % (_slow_label(slow),
                                                              ", ".join(script)), data), ""]
    return lines, {"study": st}


def _scal_label(r):
    if r.get("baseline_run"):
        return "one trainer, batch %d" % r["batch"]
    if r.get("config"):
        return r["config"]
    return r["mode"] + ("/" + r["penalty"] if r["mode"] == "async" else "")  # issue 9's rows


def _scal_slow(r):
    return "trainer %d at %gx" % (r["k"] - 1, r["slow"]) if r["slow"] else "none"


def _g(x):
    return "—" if x is None else "%g" % x


TAU_CLASSES = ["bias", "top", "rest"]  # sparrow_ps_staleness_class{class=...} of the shards


def _tau_cell(t):
    t = t or {}
    if not t.get("count"):
        return "—"
    return "%s / %s" % (f2(t.get("mean")), _g(t.get("p99")))


def _scal_ratio(r):
    """The ratio cell: the ratio to the baseline (or "(baseline)"), **diverged** by the rule:
    held-out logloss above the constant predictor's, or not finite."""
    cell = "(baseline)" if r.get("is_baseline") or (
        "is_baseline" not in r and r["k"] == 1 and not r.get("baseline_run")) else \
        f4(r.get("ratio"))
    if r.get("diverged"):
        cell += " **diverged**"
    return cell


def _scal_table(rows, classes, stream_col=False):
    t = []
    for r in rows:
        ev = r.get("eval") or {}
        run = "ok" if r.get("complete") else "**not drained**"
        if not r.get("ok"):
            run = "**failed**: " + r.get("why", "")
        elif not r.get("launch_ok"):
            run += " (then: %s)" % ("; ".join(r.get("stop_problems") or []) or
                                    "launch rc=%s" % r.get("rc"))
        ll = ev.get("logloss")
        if r.get("ok") and ev and ll is None:
            ll_cell = "not finite"
        else:
            ll_cell = f4(ll)
        tc = r.get("tau_class") or {}
        cells = ([r.get("stream_label", r.get("stream", ""))] if stream_col else []) + [
            "`%s`: %s" % (_scal_label(r), r["desc"]) if r.get("desc") and
            not r.get("baseline_run") else _scal_label(r),
            r["k"], _scal_slow(r), ll_cell, _scal_ratio(r), f4(ev.get("const_logloss")),
            f4(ev.get("bayes_logloss")), f0(r.get("ex_per_s")), f2(r.get("speed_ratio")),
            f0(r.get("busy_ex_per_s")), f2(r.get("busy_ratio")),
            "%s / %s" % (f2(r.get("tau_mean")), _g(r.get("tau_p99")))] + \
            [_tau_cell(tc.get(c)) for c in classes] + \
            ["%.0f%%" % (100 * r["wait_share"]) if r.get("wait_share") is not None else "—",
             run]
        t.append(cells)
    head = (["stream"] if stream_col else []) + [
        "mode", "K", "straggler", "held-out logloss", "ratio to baseline", "const", "Bayes",
        "examples/s", "examples/s vs sync", "busy examples/s", "busy vs sync", "tau mean / p99"] + \
        ["tau %s mean / p99" % c for c in classes] + ["wait share", "run"]
    return table(head, t)


def _scal_plots(st, rows, plots):
    """Held-out logloss against K per configuration (one plot per straggler variant, with the
    one-trainer baselines and the constant and Bayes lines) and, with the straggler, examples/s
    relative to sync against K."""
    lines = []
    labels = list(dict.fromkeys(_scal_label(r) for r in rows if not r.get("baseline_run")))
    colour = {lab: MODES_COLOURS[i % len(MODES_COLOURS)] for i, lab in enumerate(labels)}
    evs = [r["eval"] for r in rows if r.get("ok") and r.get("eval")]
    const = [e["const_logloss"] for e in evs if e.get("const_logloss") is not None]
    bayes = [e["bayes_logloss"] for e in evs if e.get("bayes_logloss") is not None]
    sb = [r for r in rows if r.get("baseline_run") and r.get("ok") and r.get("eval") and
          r["eval"].get("logloss") is not None]
    xr = "set logscale x 2\nset xlabel 'trainers K'\nset grid\nset key outside right\n" \
         "set xrange [0.8:%g]\n" % (max(st.get("ks") or [32]) * 1.25)
    for slow in sorted(set(r["slow"] for r in rows)):
        data, script = {}, []
        for i, lab in enumerate(labels):
            pts = sorted((r["k"], r["eval"]["logloss"]) for r in rows
                         if not r.get("baseline_run") and _scal_label(r) == lab and
                         r.get("ok") and r.get("eval") and r["eval"].get("logloss") is not None
                         and (r["slow"] == slow or (r["k"] == 1 and slow)))
            if not pts or (slow and all(k == 1 for k, _ in pts)):
                continue
            fn = "scal_%d_%g.dat" % (i, slow)
            data[fn] = "".join("%g %g\n" % p for p in pts)
            script.append("'%s' using 1:2 with linespoints lw 2 lc rgb '%s' title '%s'" %
                          (fn, colour[lab], lab))
        if sb:
            fn = "scal_base.dat"
            data[fn] = "".join("%g %g\n" % (r["batch"] // st.get("batch", 256),
                                            r["eval"]["logloss"])
                               for r in sorted(sb, key=lambda r: r["batch"]))
            script.append("'%s' using 1:2 with points pt 6 ps 1.5 lc rgb 'black' title 'one "
                          "trainer, batch K*%s'" % (fn, st.get("batch")))
        if not script:
            continue
        if const:
            script.append("%g with lines dt 3 lw 2 lc rgb 'red' title 'constant predictor'" %
                          const[0])
        if bayes:
            script.append("%g with lines dt 2 lw 2 lc rgb 'gray' title 'Bayes-optimal'" %
                          bayes[0])
        name = "scaling_logloss" + ("_slow%g" % slow if slow else "")
        # a diverged run far above the constant predictor would flatten every other line
        top = max([float(v.split()[1]) for d in data.values() for v in d.splitlines()] or [0])
        clip = const and top > const[0] * 1.1
        lines += [plots.plot(name, xr + "set ylabel 'held-out logloss of the final model'\n"
                             "set yrange [*:%s]\nset title 'Scaling: held-out logloss against K "
                             "(%s examples), straggler: %s%s'\nplot %s\n" %
                             ("%g" % (const[0] * 1.1) if clip else "*", f0(st.get("examples")),
                              "trainer K-1 at %gx" % slow if slow else "none",
                              ", clipped at 1.1 x const" if clip else "",
                              ", ".join(script)), data), ""]
    slow = max([r["slow"] for r in rows] or [0])
    data, script = {}, []
    for i, lab in enumerate(labels):
        pts = sorted((r["k"], r["busy_ratio"]) for r in rows
                     if not r.get("baseline_run") and _scal_label(r) == lab and r["k"] > 1 and
                     r["slow"] == slow and r.get("busy_ratio") is not None)
        if pts:
            fn = "scal_speed_%d.dat" % i
            data[fn] = "".join("%g %g\n" % p for p in pts)
            script.append("'%s' using 1:2 with linespoints lw 2 lc rgb '%s' title '%s'" %
                          (fn, colour[lab], lab))
    if script:
        lines += [plots.plot("scaling_speed", xr + "set ylabel 'busy examples/s relative to sync'\n"
                             "set title 'Scaling: busy examples/s over sync''s at the same K, "
                             "straggler: %s'\nplot %s, 1 with lines dt 2 lc rgb 'gray' "
                             "title 'sync'\n" %
                             ("trainer K-1 at %gx" % slow if slow else "none",
                              ", ".join(script)), data), ""]
    return lines


def scaling_section(res, plots):
    st = res.get("studies", {}).get("scaling") or {}
    lines = ["## Scaling: 1 to 32 trainers, held-out logloss against one trainer", ""]
    status = st.get("status", "not run")
    if not st.get("rows"):  # not run, or crashed before its first run (no sparrow eval)
        lines += [table(["K", "mode", "straggler", "result"], [("—", "—", "—", status)]), ""]
        if st.get("failures"):
            lines += ["Study: " + "; ".join(st["failures"]), ""]
        return lines, st
    smp, chk = st.get("stream", {}), st.get("stream_check") or {}
    rows = st["rows"]
    for r in rows:
        r.setdefault("part", "main")
        r.setdefault("stream", "main")
        r["stream_label"] = ((st.get("streams") or {}).get(r["stream"]) or {}).get(
            "label", r["stream"])
    order = [c["name"] for c in st.get("configs") or []] + list(st.get("candidates") or [])

    def key(r):  # K, then the configurations' order, the one-trainer baselines after them
        return (r["stream"], r["k"], r.get("baseline_run", False), r.get("batch", 0),
                order.index(r.get("config")) if r.get("config") in order else len(order),
                r["slow"])

    main = sorted((r for r in rows if r["part"] == "main"), key=key)
    check = sorted((r for r in rows if r["part"] == "defaults"), key=key)
    seen = set(c for r in rows for c in (r.get("tau_class") or {}) if
               (r["tau_class"][c] or {}).get("count"))
    classes = TAU_CLASSES + sorted(seen - set(TAU_CLASSES))
    lines += ["Each configuration is one `sparrow launch` run (bench/study_scaling.py): K CPU "
              "trainer processes (FM k=4, batch %s), %s shards, the coordinator and the Kafka "
              "mock (%s partitions). The generator produces the same %s examples every time (seed "
              "%s, %s fields, drift %s rad/M, vocabulary up to %s) before the trainers start; a "
              "run ends when the coordinator's LATEST checkpoint counts all of them, or fails after "
              "%s s. The final model (that checkpoint) is scored by `sparrow eval` on a held-out "
              "tail of %s examples that no trainer read: the next %s examples of the same stream "
              "(`gen --n N+H`, its first N checked byte for byte against `gen --n N`; every run's "
              "generator reported click rate %s and Bayes-optimal logloss %s over its N, as "
              "`gen --n N` did). *Ratio*: held-out logloss over the baseline's, one trainer on "
              "the same examples: K=1 of the same configuration for the async family; for the "
              "sync family (sync, backup workers, elastic) one trainer with batch K·%s (which sync "
              "with K trainers of batch %s should equal); for group:G one trainer with batch G·%s "
              "(one group); a one-trainer baseline row is compared with K=1 sync. A run whose "
              "held-out logloss ends above the constant predictor's (or is not finite) is marked "
              "**diverged**. *Const* and *Bayes*: the constant predictor's and the planted "
              "model's logloss on the held-out examples (from `sparrow eval`). *Examples/s*: "
              "launch's train_ex_per_s (N over the time to drain: with fixed partitions the "
              "straggler's own share ends every mode's run at about the same time, so this "
              "measures the straggler); *busy examples/s*: the examples trained while every "
              "trainer still had data (by the time the first trainer finished its share, from "
              "launch's samples.csv) over that time, the rate a continuous stream would see; "
              "*vs sync*: over `sync`'s with the same straggler at the same K on the same stream. "
              "tau: the shards' `sparrow_ps_staleness` (mean from its "
              "sum; p99 as a bucket bound), and per row class the shards' "
              "`sparrow_ps_staleness_class{class=...}` (launch sums each shard's histogram, read "
              "from its /metrics as the run ends, into summary.json's `staleness_class`; — where "
              "the shards do not export it). *Wait share*: the seconds the trainers waited for the "
              "coordinator during the run (`sparrow_trainer_coord_wait_seconds`) over K times the "
              "run's duration. The straggler is trainer K-1 slowed %sx "
              "(`trainer.debug.slow_factor`); K=1 has none. Every configuration ran once." %
              (st.get("batch"), st.get("shards"), st.get("partitions"), f0(st.get("examples")),
               smp.get("seed"), smp.get("fields"), smp.get("drift"), f0(smp.get("vocab_max")),
               st.get("duration"), f0(st.get("heldout")), f0(st.get("heldout")),
               (chk.get("gen_head") or {}).get("ctr", "?"),
               (chk.get("gen_head") or {}).get("bayes_logloss", "?"), st.get("batch"),
               st.get("batch"), st.get("batch"), _g(st.get("straggler", 4))), ""]
    if st.get("configs"):
        lines += ["The configurations (`--set ROLE:KEY=VALUE` given to launch besides --mode and "
                  "--penalty):", ""]
        lines += [table(["name", "mode", "penalty", "settings", "description"],
                        [("`%s`" % c["name"], c["mode"], c["penalty"],
                          " ".join("`%s`" % x for x in c["sets"]) or "—", c["desc"])
                         for c in st["configs"]]), ""]
    if st.get("by_design"):
        lines += ["Not run by design: " + "; ".join(st["by_design"]) + ".", ""]
    lines += ["Per run: `%s`; the held-out tail: `%s`; per run: `%s`." %
              (_rel(res, st.get("command", "")), _rel(res, st.get("gen_command", "")),
               _rel(res, st.get("eval_command", ""))), "",
              "Study status: %s (%.0f s; %s of %s planned runs ran)." %
              (status, st.get("secs", 0), len(rows), st.get("planned", len(rows))), ""]
    if main:
        lines += [_scal_table(main, classes), ""]
    if st.get("failures"):
        lines += ["Failed, incomplete or skipped runs (a run that did not drain is not evaluated; "
                  "its other figures are those it had when it stopped): " +
                  "; ".join(st["failures"]), ""]
    if main:
        lines += _scal_plots(st, main, plots)
    if check or st.get("candidates"):
        streams = st.get("streams") or {}
        lines += ["### Defaults check: the candidate defaults on other streams", ""]
        lines += ["The candidate default configurations (%s) on %d more generated streams (%s), "
                  "at K = %s, K > 1 with trainer K-1 slowed %sx; each stream with its own "
                  "held-out tail and baselines, checked as the main stream's. `sync` runs beside "
                  "them at the same K for the examples/s ratio." %
                  (", ".join("`%s`" % c for c in st.get("candidates") or []),
                   len([t for t in streams if t != "main"]),
                   "; ".join("%s: %s (`%s`)" % (t, s["label"], " ".join(
                       "%s=%s" % kv for kv in sorted(s["gen"].items())))
                       for t, s in streams.items() if t != "main"),
                   ", ".join(map(str, st.get("defaults_ks") or [])),
                   _g((st.get("defaults_slows") or [None])[0])), ""]
        if check:
            lines += [_scal_table(check, classes, stream_col=True), ""]
        else:
            lines += ["No defaults-check run in this study.", ""]
    return lines, st


def scaling_choose(st):
    """The mode bullets of "How to choose", computed from the scaling study's rows."""
    allrows = [r for r in st.get("rows") or [] if not r.get("baseline_run")]
    rows = [r for r in allrows if r.get("part", "main") == "main"]
    if not allrows:
        return ["- **Mode (scaling study).** No scaling figures in this run (%s)." %
                st.get("status", "not run"), ""]
    within = st.get("within", 0.005)
    out = ["- **Mode (scaling study: held-out logloss of the final model against one trainer "
           "on the same examples; within %g%% means a ratio <= %g).**" %
           (100 * within, 1 + within)]
    for lab in dict.fromkeys(_scal_label(r) for r in rows):
        for slow in sorted(set(r["slow"] for r in rows if r["k"] > 1)):
            rs = sorted((r for r in rows if _scal_label(r) == lab and r["k"] > 1 and
                         r["slow"] == slow), key=lambda r: r["k"])
            if not rs:
                continue
            ok = [r for r in rs if r.get("ratio") is not None]
            missing = [r["k"] for r in rs if r.get("ratio") is None]
            inside = [r["k"] for r in ok if r["within"]]
            outside = [r for r in ok if not r["within"]]
            div = [r["k"] for r in rs if r.get("diverged")]
            upto = None
            for r in ok:
                if not r["within"]:
                    break
                upto = r["k"]
            txt = "  - `%s`, straggler %s: " % (lab, "trainer K-1 at %gx" % slow if slow
                                                 else "none")
            if not ok:
                txt += "no evaluated run with a baseline"
            else:
                txt += ("within %g%% of its baseline at every K measured (%s)" %
                        (100 * within, ", ".join(map(str, inside))) if not outside else
                        "within %g%% up to K=%s" % (100 * within, upto) if upto else
                        "not within %g%% at any K > 1" % (100 * within))
                if outside:
                    txt += "; above it at K=%s" % ", ".join(
                        "%d (%s)" % (r["k"], f4(r["ratio"])) for r in outside)
            if div:
                txt += "; **diverged** (held-out logloss above the constant predictor's) "
                txt += "at K=%s" % ", ".join(map(str, div))
            sp = [r for r in rs if r.get("busy_ratio") is not None]
            if sp and lab != "sync":
                txt += "; busy examples/s vs sync %s" % ", ".join(
                    "K=%d %s" % (r["k"], f2(r["busy_ratio"])) for r in sp)
            if missing:
                txt += "; no figure at K=%s (not drained, not evaluated or no baseline)" % \
                    ", ".join(map(str, missing))
            out.append(txt + ".")
    divs = sorted(set(_scal_label(r) for r in rows if r.get("diverged")))
    out.append("  - Diverged in this run: %s." % (", ".join("`%s`" % d for d in divs) if divs
                                                  else "none"))
    cands = st.get("candidates") or []
    check = [r for r in allrows if r.get("part") == "defaults" and r["k"] > 1 and
             (not cands or r.get("config") in cands)]  # not sync, the examples/s reference
    if check:
        out.append("  - Defaults check (other streams, straggler on):")
        for lab in dict.fromkeys(_scal_label(r) for r in check):
            rs = [r for r in check if _scal_label(r) == lab]
            out.append("    - `%s`: %s." % (lab, "; ".join(
                "%s K=%d ratio %s%s, busy examples/s vs sync %s" % (
                    r.get("stream_label", r["stream"]), r["k"], f4(r.get("ratio")),
                    " **diverged**" if r.get("diverged") else "", f2(r.get("busy_ratio")))
                for r in sorted(rs, key=lambda r: (r["stream"], r["k"])))))
    return out + [""]


def staleness_section(res, plots):
    s = res.get("studies", {}).get("staleness", {})
    lines = ["## Staleness control: tau against logloss, per penalty", ""]
    if s.get("rows") is None or s.get("status", "").startswith("not run"):
        lines += [table(["writers", "penalty", "result"],
                        [("—", "—", s.get("status", "not run"))]),
                  ""]
        return lines, {}
    lines += ["K concurrent `sparrow trainer` processes (K = %s), each sleeping %s ms before every "
              "step (`trainer.debug.delay_ms`) and reading its own part of the common stream "
              "(%s examples dealt in blocks of %s, so every part spans the whole stream), push to "
              "one `sparrow pserver` shard with `pserver.staleness.penalty` = none, inverse "
              "(1/(1+tau)) or exp:0.5 (0.5^tau). FM k=8, Adagrad, lr 0.05. tau is what the shard "
              "measured for every pushed row (`sparrow_ps_staleness`): the mean, and the bucket "
              "bounds (0, 1, 2, 4, … 1024) holding the 50th/90th/99th percentiles. tau comes from "
              "the other writers' pushes landing between a trainer's pull and its push (plus up "
              "to one from its own pipelined pull), so it grows with K (K is chosen for a tau of "
              "about 0, 4, 16 and 64: about 0.6 K on 2 cores); the delay is the same in "
              "every run. Logloss: the mean of the trainers' final-window logloss (the last "
              "quarter of each part)." %
              (", ".join(map(str, s.get("writers", []))), s.get("delay_ms"),
               f0(s.get("examples")), s.get("batch")), ""]
    rows = s["rows"]
    t = [(r["writers"], r["penalty"], f2(r["tau_mean"]),
          "%s / %s / %s" % tuple(("%g" % q if q is not None else "—")
                                 for q in (r["tau_p50"], r["tau_p90"], r["tau_p99"])),
          "%.0f%%" % (100 * r["tau_zero_frac"]) if r.get("tau_zero_frac") is not None else "—",
          f4(r["window_logloss"]), f4(r["window_auc"]),
          sgn4(r["window_logloss"] - r["bayes_logloss"]), f0(r["ex_per_s"]))
         for r in rows]
    lines += [table(["writers K", "penalty", "tau mean (measured)", "tau p50 / p90 / p99 (bucket)",
                     "rows with tau 0", "final-window logloss", "AUC", "gap to Bayes",
                     "examples/s (all)"], t), ""]
    if s.get("failures"):
        lines += ["Failed runs: " + "; ".join(s["failures"]), ""]
    data, script = {}, []
    for i, pen in enumerate(s.get("penalties", [])):
        pts = sorted((r["tau_mean"], r["window_logloss"]) for r in rows if r["penalty"] == pen
                     and r["tau_mean"] is not None)
        if pts:
            fn = "stale_%d.dat" % i
            data[fn] = "".join("%g %g\n" % p for p in pts)
            script.append("'%s' using 1:2 with linespoints lw 2 title 'penalty %s'" % (fn, pen))
    if script:
        bayes = [r["bayes_logloss"] for r in rows if r.get("bayes_logloss")]
        extra = (", %g with lines dt 2 lc rgb 'gray' title 'Bayes-optimal'" %
                 (sum(bayes) / len(bayes))) if bayes else ""
        lines += [plots.plot("staleness",
                             "set logscale xy\nset xlabel 'tau, mean over pushed rows (measured "
                             "by the shard)'\nset ylabel 'final-window logloss'\nset grid\nset "
                             "key top left\nset title 'Staleness control: K = %s writers'\nplot "
                             "[0.1:] %s%s\n" % (", ".join(map(str, s.get("writers", []))),
                                                ", ".join(script), extra), data), ""]
    return lines, s


def compression_section(res, plots):
    s = res.get("studies", {}).get("compression", {})
    lines = ["## Compression: bytes pushed per example against logloss", ""]
    if s.get("rows") is None or s.get("status", "").startswith("not run"):
        lines += [table(["variant", "result"], [("—", s.get("status", "not run"))]), ""]
        return lines, {}
    lines += ["One `sparrow trainer` per variant on the common stream (%s examples), FM k=8, "
              "batch 512, in-process shard, Adagrad lr 0.05; `trainer.topk.ratio` R, "
              "`trainer.push.fp16`, `trainer.error_feedback`. Bytes per example are those of "
              "the steps' pushes; the residual flush at the end of the run (a checkpoint's "
              "work, amortised over a checkpoint interval in a long run) is shown beside them. "
              "Ratio 1.0 sends every row, so error feedback keeps nothing: one run per value "
              "type stands for both lines." % f0(s.get("examples")), ""]
    rows = s["rows"]
    base = next((r for r in rows if not r["fp16"] and r["ratio"] == 1.0 and r["ef"]), None)
    t = []
    for r in rows:
        if r.get("shared"):
            continue
        red = (base["step_bytes_per_example"] / r["step_bytes_per_example"]
               if base and r["step_bytes_per_example"] else None)
        t.append(("fp16" if r["fp16"] else "fp32", "—" if r["ratio"] == 1.0 else
                  ("on" if r["ef"] else "off"), "%g" % r["ratio"],
                  f2(r["step_bytes_per_example"]), f2(r["bytes_per_example"]),
                  "%.1fx" % red if red else "—", f4(r["window_logloss"]),
                  sgn4(r["window_logloss"] - base["window_logloss"]) if base else "—",
                  f4(r["window_auc"]), f0(r["ex_per_s"])))
    lines += [table(["values", "error feedback", "top-k ratio", "bytes/example (steps)",
                     "with final flush", "fewer bytes vs fp32 1.0", "final-window logloss",
                     "vs fp32 1.0", "AUC", "examples/s"], t), ""]
    if s.get("failures"):
        lines += ["Failed runs: " + "; ".join(s["failures"]), ""]
    data, script = {}, []
    for i, (fp16, ef) in enumerate(((False, True), (False, False), (True, True), (True, False))):
        pts = sorted((r["step_bytes_per_example"], r["window_logloss"]) for r in rows
                     if r["fp16"] == fp16 and r["ef"] == ef and r["step_bytes_per_example"])
        if pts:
            fn = "comp_%d.dat" % i
            data[fn] = "".join("%g %g\n" % p for p in pts)
            script.append("'%s' using 1:2 with linespoints lw 2 title '%s, %s error feedback'" %
                          (fn, "fp16" if fp16 else "fp32", "with" if ef else "without"))
    if script:
        lines += [plots.plot("compression",
                             "set logscale x\nset xlabel 'bytes pushed per example (top-k ratios "
                             "1.0 ... 0.001)'\nset ylabel 'final-window logloss'\nset grid\nset "
                             "key below\nset title 'Compression: FM k=8, %s examples'\nplot "
                             "%s\n" % (f0(s.get("examples")), ", ".join(script)), data), ""]
    return lines, s


def _pct(x, base):
    return "%+.2f%%" % (100.0 * (x / base - 1.0)) if x is not None and base else "—"


def deep_section(res):
    s = res.get("studies", {}).get("deep", {})
    lines = ["## Deep models: FM, DeepFM, DCN-v2, PyTorch, K trainers", ""]
    if s.get("rows") is None or s.get("status", "").startswith("not run"):
        lines += [table(["model", "result"], [("—", s.get("status", "not run"))]), ""]
        return lines
    lines += ["bench/study_deep.py. One `sparrow trainer` per model (CPU backend, in-process "
              "shard, batch 1024, k=8, MLP 128,64, 2 cross layers for DCN-v2, Adagrad lr 0.05, "
              "dense lr 0.005), one pass over the first %s examples of each stream, scored by "
              "`sparrow eval` on the %s that follow. Gap to Bayes: held-out logloss minus the "
              "planted model's (`oracle_p`) on the same file. Examples/s: Sparrow's from the "
              "trainer's finished line (reading its input included); PyTorch's of its training "
              "loop alone (input already made tensors), torch threads = the machine's cores." %
              (f0(s.get("examples")), f0(s.get("heldout"))), ""]
    rows = [r for r in s["rows"] if r.get("eval")]
    t = []
    for r in rows:
        ev = r["eval"]
        fm = next((x for x in rows if x["stream"] == r["stream"] and x["model"] == "fm"
                   and not x.get("peer")), None)
        mine = next((x for x in rows if x["stream"] == r["stream"] and x["model"] == r["model"]
                     and not x.get("peer")), None)
        peer = r.get("peer")
        t.append(((s.get("streams", {}).get(r["stream"]) or {}).get("label", r["stream"]),
                  "%s%s" % (r["model"], " (PyTorch)" if peer else ""), f4(ev.get("logloss")),
                  f4(ev.get("auc")), sgn4(ev["logloss"] - ev["bayes_logloss"]),
                  _pct(ev.get("logloss"), fm["eval"]["logloss"]) if fm else "—",
                  f4(ev.get("const_logloss")), f4(ev.get("bayes_logloss")), f0(r.get("ex_per_s")),
                  ("Sparrow %s: %.2fx its examples/s, logloss %s" % (
                      r["model"], mine["ex_per_s"] / r["ex_per_s"],
                      _pct(mine["eval"]["logloss"], ev["logloss"]))
                   if peer and mine and mine.get("ex_per_s") and r.get("ex_per_s") else "")))
    lines += [table(["stream", "model", "held-out logloss", "AUC", "gap to Bayes", "vs FM",
                     "constant", "Bayes", "examples/s", "Sparrow against the peer"], t), ""]
    k = s.get("k") or {}
    if k.get("rows"):
        lines += ["`sparrow launch` (2 shards, coordinator, Kafka mock, trainers of batch 256, "
                  "DeepFM k=4 over launch's 39 fields) on the deep stream, %s examples, scored on "
                  "%s held-out: K trainers against one trainer (async's baseline, batch 256) and "
                  "one of batch K x 256 (sync's: the same examples per step; a sync run whose dense "
                  "network steps at sqrt(K) its rate, pserver.sync.dense_lr_scale's default, "
                  "against the one of batch K x 256 whose pserver.lr.dense is sqrt(K) x 0.005). "
                  "Rows in the steps: "
                  "which rows wait for a synchronous step's commit (all; dense: the bias and the "
                  "dense blocks only, `trainer.sync.rows=dense`, the embedding rows applied as "
                  "they arrive)." % (f0(k.get("examples")), f0(k.get("heldout"))), ""]

        def one(batch, sqrt=False):
            r = next((x for x in k["rows"] if x["k"] == 1 and x["batch"] == batch and
                      bool(x.get("dense_lr_sqrt")) == sqrt), None)
            return (r.get("eval") or {}).get("logloss") if r else None
        t = []
        for r in k["rows"]:
            ev = r.get("eval") or {}
            t.append((r["desc"], r["k"], r["mode"],
                      r.get("sync_rows", "all") if r["mode"] == "sync" else "—",
                      f4(ev.get("logloss")),
                      _pct(ev.get("logloss"), one(256)) if r["k"] > 1 else "—",
                      _pct(ev.get("logloss"), one(256 * r["k"], bool(r.get("dense_lr_sqrt"))))
                      if r["k"] > 1 else "—",
                      sgn4(ev["logloss"] - ev["bayes_logloss"]) if ev else "—",
                      f0(r.get("ex_per_s")), "" if r.get("ok") else r.get("why", "")[:120]))
        lines += [table(["run", "K", "mode", "rows in the steps", "held-out logloss",
                         "vs one trainer, batch 256", "vs one trainer, batch K x 256",
                         "gap to Bayes", "examples/s", "problem"], t), ""]
    if s.get("failures"):
        lines += ["Failed runs: " + "; ".join(s["failures"]), ""]
    return lines


def freshness_section(res):
    s = res.get("studies", {}).get("freshness", {})
    lines = ["## Freshness: publish interval, event to serving, update-stream cost", ""]
    if s.get("rows") is None or s.get("status", "").startswith("not run"):
        lines += [table(["interval", "result"], [("—", s.get("status", "not run"))]), ""]
        return lines
    lines += ["bench/study_freshness.py. `%s` per interval: once the pipeline is steady (the "
              "trainers and serve hold partitions and have read to the end of them; seconds "
              "from the start in the table) and %s s more, serve's "
              "`sparrow_serve_freshness_seconds` and the shards' `sparrow_ps_published_total` "
              "and `sparrow_ps_published_bytes_total` differenced over %s s. Quantiles are the "
              "upper bound of the histogram bucket that holds them. Target (issue 20): "
              "event to visible p99 <= 1 s." % (s.get("command", "?"), s.get("warm_s", "?"),
                                               s.get("window_s", "?")), ""]

    def q(r, st):
        h = r.get(st) or {}
        return "%s / %s" % (h.get("p50", "—"), h.get("p99", "—")) if h else "—"
    t = [(r["interval"], r.get("steady_s", "—"), f0((r.get("event_to_visible") or {}).get("n")),
          q(r, "event_to_shard"), q(r, "shard_to_visible"), q(r, "event_to_visible"),
          f0(r.get("rows_per_s")), f0(r.get("bytes_per_s")), f0(r.get("train_ex_per_s")),
          r.get("why", "")[:120]) for r in s["rows"]]
    lines += [table(["publish interval", "steady after s", "updates", "event to shard p50 / p99 s",
                     "shard to visible p50 / p99 s", "event to visible p50 / p99 s",
                     "rows/s published", "bytes/s published", "trained ex/s", "problem"], t), ""]
    if s.get("failures"):
        lines += ["Failed runs: " + "; ".join(s["failures"]), ""]
    return lines


def _big_batch(s, prefetch=True):
    """The one-large-batch row of the accumulation study (with or without pipelined pulls)."""
    return next((r for r in s.get("rows") or [] if r["acc_steps"] == 1 and
                 r["batch"] == s.get("micro_batch", 0) * 8 and
                 r.get("prefetch", True) == prefetch), None)


def accumulation_section(res):
    s = res.get("studies", {}).get("accumulation", {})
    lines = ["## Gradient accumulation: memory, rate, logloss", ""]
    if s.get("rows") is None or s.get("status", "").startswith("not run"):
        lines += [table(["variant", "result"], [("—", s.get("status", "not run"))]), ""]
        return lines, {}
    lines += ["`trainer.acc_steps` 1, 2, 4, 8 at micro-batch %s against one batch of %s "
              "(acc_steps 1), on the common stream (%s examples), FM k=8, one `sparrow pserver` "
              "shard started fresh per run. Peak resident memory is the trainer process's own "
              "(getrusage of the child, from wait4); the shard is another process." %
              (s.get("micro_batch"), s.get("micro_batch", 0) * 8, f0(s.get("examples"))), ""]
    rows = s["rows"]
    t = []
    for r in rows:
        big = _big_batch(s, r.get("prefetch", True))
        t.append((r["batch"], r["acc_steps"], r["step_examples"],
                  "on" if r.get("prefetch", True) else "off", "%.1f" % r["max_rss_mib"],
                  ("%+.1f" % (r["max_rss_mib"] - big["max_rss_mib"])) if big else "—",
                  f0(r["ex_per_s"]), f4(r["window_logloss"]),
                  sgn4(r["window_logloss"] - big["window_logloss"]) if big else "—",
                  f4(r["window_auc"])))
    lines += [table(["micro-batch", "acc_steps", "examples per push", "pipelined pulls",
                     "peak RSS, MiB",
                     "vs one large batch, MiB", "examples/s", "final-window logloss",
                     "vs one large batch", "AUC"], t), ""]
    if s.get("failures"):
        lines += ["Failed runs: " + "; ".join(s["failures"]), ""]
    return lines, s


def modes_choose(st):
    """The modes bullet of "How to choose", computed from the study's drained runs."""
    if not st.get("rows") and not st.get("failures"):
        return ["- **Mode.** No modes figures in this run (bench/study_modes.py: %s)." %
                st.get("status", "not run"), ""]
    rows = [r for r in st.get("rows") or [] if r["ok"] and r["ex_per_s"]]
    n_all = len(st.get("rows") or []) + len(st.get("skipped") or [])
    if not rows:
        return ["- **Mode.** No modes configuration drained in this run (%d of %d)." %
                (0, n_all), ""]
    among = (" (from the %d of %d configurations that drained)" % (len(rows), n_all)
             if len(rows) < n_all else "")
    out = ["- **Mode%s.**" % among]
    for slow in sorted(set(r["slow"] for r in rows)):
        rs = [r for r in rows if r["slow"] == slow]
        fast = max(rs, key=lambda r: r["ex_per_s"])
        best = min(rs, key=lambda r: r["window_logloss"] if r["window_logloss"] is not None
                   else float("inf"))
        sync = next((r for r in rs if r["mode"] == "sync"), None)
        txt = "  - Straggler %s: the fastest was `%s`, %s examples/s%s; the lowest final-window " \
              "logloss `%s`, %s (gap to Bayes %s)" % (
                  _slow_label(slow), _mode_label(fast), f0(fast["ex_per_s"]),
                  " (%sx sync)" % f2(fast.get("ratio_vs_sync")) if fast.get("ratio_vs_sync")
                  else "", _mode_label(best), f4(best["window_logloss"]),
                  sgn4(best["gap_to_bayes"]))
        if sync:
            txt += "; `sync` ran %s examples/s to %s" % (f0(sync["ex_per_s"]),
                                                          f4(sync["window_logloss"]))
            if best is not sync and sync["window_logloss"] is not None and \
                    best["window_logloss"] is not None:
                txt += " (%s against the lowest)" % sgn4(sync["window_logloss"] -
                                                         best["window_logloss"])
            if fast is not sync and fast["window_logloss"] is not None and \
                    sync["window_logloss"] is not None:
                txt += "; the fastest ended %s against sync's logloss" % sgn4(
                    fast["window_logloss"] - sync["window_logloss"])
        out.append(txt + ".")
    # what a straggler costs each mode: its rate with the slowest straggler against none
    slows = sorted(set(r["slow"] for r in rows))
    if len(slows) > 1 and slows[0] == 0:
        worst = slows[-1]
        cost = []
        for lab in dict.fromkeys(_mode_label(r) for r in rows):
            a = next((r for r in rows if _mode_label(r) == lab and r["slow"] == 0), None)
            b = next((r for r in rows if _mode_label(r) == lab and r["slow"] == worst), None)
            if a and b:
                cost.append("`%s` %sx" % (lab, f2(b["ex_per_s"] / a["ex_per_s"])))
        if cost:
            out.append("  - Examples/s with trainer %d at %gx, against no straggler: %s." %
                       (MODES_SLOWED, worst, ", ".join(cost)))
    # the penalty, where staleness is highest: async
    for slow in slows:
        asy = [r for r in rows if r["mode"] == "async" and r["slow"] == slow and
               r["window_logloss"] is not None]
        if len(asy) > 1:
            b = min(asy, key=lambda r: r["window_logloss"])
            out.append("  - Async penalties (straggler %s), final-window logloss: %s; the lowest "
                       "`%s`." %
                       (_slow_label(slow), ", ".join(
                           "`%s` %s (tau p99 %s)" % (r["penalty"], f4(r["window_logloss"]),
                                                     "%g" % r["tau_p99"] if r["tau_p99"] is not
                                                     None else "—") for r in asy),
                        b["penalty"]))
    for fam, par in (("ssp", "S"), ("hybrid", "K")):
        for slow in slows:
            fr = sorted((r for r in rows if r["mode"].startswith(fam + ":") and
                         r["slow"] == slow), key=lambda r: float(r["mode"].split(":")[1]))
            if len(fr) > 1:
                out.append("  - `%s:%s` (straggler %s), %s = %s: examples/s %s, logloss %s." %
                           (fam, par, _slow_label(slow), par,
                            ", ".join(r["mode"].split(":")[1] for r in fr),
                            ", ".join(f0(r["ex_per_s"]) for r in fr),
                            ", ".join(f4(r["window_logloss"]) for r in fr)))
    return out + [""]


def choose_section(res, modes_best, stale, comp, acc):
    lines = ["## How to choose (from the figures above)", ""]
    q = " (smoke-run figures: re-read after a full run)" if res.get("quick") else ""
    lines += ["Every statement below is computed from this run's tables%s." % q, ""]
    # the mode: first from the scaling study (held-out logloss against one trainer)
    lines += scaling_choose(res.get("studies", {}).get("scaling") or {})
    # then the modes study's throughput and window logloss with 4 trainers
    if modes_best.get("study") is not None:
        lines += modes_choose(modes_best["study"])
    elif modes_best.get("rate") or modes_best.get("logloss"):
        parts = []
        if modes_best.get("rate"):
            parts.append("the highest throughput was `%s` (%s examples/s)" %
                         (modes_best["rate"][0], f0(modes_best["rate"][1])))
        if modes_best.get("logloss"):
            parts.append("the lowest final logloss was `%s` (%s)" %
                         (modes_best["logloss"][0], f4(modes_best["logloss"][1])))
        fin = modes_best.get("finished")
        among = (" (among the %d of %d configurations that finished)" % fin
                 if fin and fin[0] < fin[1] else "")
        lines += ["- **Mode.** In the modes benchmark%s " % among + " and ".join(parts) + ".",
                  ""]
    elif modes_best.get("finished"):
        lines += ["- **Mode.** No modes configuration finished in this run (%d of %d)." %
                  modes_best["finished"], ""]
    else:
        lines += ["- **Mode.** No modes figures in this run (the modes study: %s)." %
                  res.get("studies", {}).get("modes", {}).get("status", "not run"), ""]
    # staleness
    rows = stale.get("rows") or []
    if rows:
        base = [r for r in rows if r["writers"] == min(x["writers"] for x in rows)]
        b = min(base, key=lambda r: r["window_logloss"])
        out = []
        for k in sorted(set(r["writers"] for r in rows)):
            rk = [r for r in rows if r["writers"] == k]
            best = min(rk, key=lambda r: r["window_logloss"])
            none = next((r for r in rk if r["penalty"] == "none"), None)
            taus = sorted(r["tau_mean"] for r in rk if r["tau_mean"] is not None)
            tau_s = (f2(taus[0]) if taus[0] == taus[-1] or len(taus) == 1 else
                     "%s–%s" % (f2(taus[0]), f2(taus[-1]))) if taus else "—"
            out.append("K=%d (tau mean %s): best `%s` at %s%s" %
                       (k, tau_s, best["penalty"], f4(best["window_logloss"]),
                        (", `none` %s (%s)" % (f4(none["window_logloss"]),
                                               sgn4(none["window_logloss"] -
                                                    best["window_logloss"])))
                        if none and none is not best else ""))
        worst_none = max((r for r in rows if r["penalty"] == "none"),
                         key=lambda r: r["tau_mean"] or 0, default=None)
        lines += ["- **Staleness penalty.** With one writer the logloss is %s (tau mean %s). "
                  "By measured staleness: %s." % (f4(b["window_logloss"]), f2(b["tau_mean"]),
                                                   "; ".join(out))]
        if worst_none:
            lines += ["  Without a penalty, the most stale setting (tau mean %s) ends %s above "
                      "the one-writer logloss; the best penalty there ends %s above it." %
                      (f2(worst_none["tau_mean"]),
                       sgn4(worst_none["window_logloss"] - b["window_logloss"]),
                       sgn4(min((r for r in rows if r["writers"] == worst_none["writers"]),
                                key=lambda r: r["window_logloss"])["window_logloss"] -
                            b["window_logloss"]))]
        lines += [""]
    # compression
    crow = [r for r in comp.get("rows") or [] if not r.get("shared")]
    base = next((r for r in crow if not r["fp16"] and r["ratio"] == 1.0), None)
    if base:
        ok = [r for r in crow if r["ef"] or r["ratio"] == 1.0]
        ok = [r for r in ok if r["window_logloss"] - base["window_logloss"] <= 0.002 and
              r["step_bytes_per_example"]]
        pick = min(ok, key=lambda r: r["step_bytes_per_example"]) if ok else None
        text = "- **Compression.** Uncompressed fp32 pushes %s bytes/example at logloss %s. " % (
            f2(base["step_bytes_per_example"]), f4(base["window_logloss"]))
        if pick:
            noef = next((r for r in crow if r["fp16"] == pick["fp16"] and
                         r["ratio"] == pick["ratio"] and not r["ef"]), None)
            text += ("The fewest bytes within +0.002 logloss of it: top-k %g, %s, error feedback "
                     "on: %s bytes/example (%.1fx fewer; %s counting the final residual flush "
                     "of this %s-example run), logloss %s (%s)" %
                     (pick["ratio"], "fp16" if pick["fp16"] else "fp32",
                      f2(pick["step_bytes_per_example"]),
                      base["step_bytes_per_example"] / pick["step_bytes_per_example"],
                      f2(pick["bytes_per_example"]), f0(comp.get("examples")),
                      f4(pick["window_logloss"]),
                      sgn4(pick["window_logloss"] - base["window_logloss"])))
            if noef and noef is not pick:
                text += "; the same without error feedback: %s (%s)" % (
                    f4(noef["window_logloss"]), sgn4(noef["window_logloss"] -
                                                     pick["window_logloss"]))
            text += "."
        else:
            text += "No compressed variant stayed within +0.002 logloss of it."
        h = next((r for r in crow if r["fp16"] and r["ratio"] == 1.0), None)
        if h:
            text += (" fp16 alone: %.2fx the bytes of fp32 at logloss %s." %
                     (h["step_bytes_per_example"] / base["step_bytes_per_example"],
                      sgn4(h["window_logloss"] - base["window_logloss"])))
        lines += [text, ""]
    # accumulation
    arow = acc.get("rows") or []
    big = _big_batch(acc)
    a8 = next((r for r in arow if r["acc_steps"] == 8 and r.get("prefetch", True)), None)
    big0 = _big_batch(acc, False)
    a80 = next((r for r in arow if r["acc_steps"] == 8 and not r.get("prefetch", True)), None)
    if big and a8:
        d = big["max_rss_mib"] - a8["max_rss_mib"]
        lines += ["- **Gradient accumulation.** acc_steps 8 at micro-batch %d peaked at %.1f MiB, "
                  "one batch of %d at %.1f MiB: accumulation %s %.1f MiB (%.0f%%), at %s "
                  "examples/s against %s, logloss %s against %s." %
                  (a8["batch"], a8["max_rss_mib"], big["batch"], big["max_rss_mib"],
                   "saved" if d >= 0 else "cost", abs(d), 100 * abs(d) / big["max_rss_mib"],
                   f0(a8["ex_per_s"]), f0(big["ex_per_s"]), f4(a8["window_logloss"]),
                   f4(big["window_logloss"]))]
        if big0 and a80 and abs(a80["window_logloss"] - big0["window_logloss"]) < \
                abs(a8["window_logloss"] - big["window_logloss"]):
            lines += ["  Without pipelined pulls the two end at logloss %s and %s (%s apart), "
                      "with them at %s and %s: a prefetched pull misses the push of the step "
                      "before it, which costs one large batch a whole step and accumulation only "
                      "its first micro-batch." %
                      (f4(a80["window_logloss"]), f4(big0["window_logloss"]),
                       sgn4(a80["window_logloss"] - big0["window_logloss"]),
                       f4(a8["window_logloss"]), f4(big["window_logloss"]))]
        lines += [""]
    return lines


def sizing_section(res, rates, comp):
    lines = ["## Sizing", ""]
    crow = comp.get("rows") or []
    base = next((r for r in crow if not r["fp16"] and r["ratio"] == 1.0 and r["ef"]), None)
    rpe = base["rows_pushed"] / base["examples"] if base and base.get("examples") else None
    need = {"trainer examples/s per process (trainer_bench (c), FM k=16)": rates.get("trainer"),
            "shard push rows/s per process (pserver_bench (d))": rates.get("push"),
            "shard pull rows/s per process (pserver_bench (d))": rates.get("pull"),
            "ingest protobuf events/s per process (ingest_bench)": rates.get("ingest"),
            "serve single-example requests/s per process (serve_bench)": rates.get("serve"),
            "resident bytes per DRAM row, dim 16 (pserver_bench (b))": rates.get("row_bytes"),
            "distinct rows per example per push, batch 512 (compression study, ratio 1.0)": rpe}
    lines += ["Measured per-process rates (each process counted as one core; on this %s-core "
              "machine a process also shared the cores with its peer, so these are lower "
              "bounds of one core's rate):" % res["machine"].get("nproc"), ""]
    lines += [table(["rate", "measured"], [(k, f2(v) if v is not None and v < 1000 else f0(v))
                                           for k, v in need.items()]), ""]
    if any(v is None for k, v in need.items() if "serve" not in k):
        lines += ["Some rates are missing from this run, so no sizing table is computed.", ""]
        return lines
    mem_gib = 32
    models = [(100e6, "100M rows"), (1e9, "1B rows")]
    shard_s_per_ex = rpe / rates["push"] + rpe / rates["pull"]
    t, first_last, big_kind = [], [], []
    for rate in (1e5, 1e6, 1e7):
        for rows_n, name in models:
            ing = math.ceil(rate / rates["ingest"])
            trn = math.ceil(rate / rates["trainer"])
            tp = math.ceil(rate * shard_s_per_ex)
            mem = math.ceil(rows_n * rates["row_bytes"] / (mem_gib * 2**30))
            counts = {"ingest": ing, "trainers": trn,
                      "shards (%s)" % ("memory" if mem > tp else "pushes and pulls"): max(tp, mem)}
            top = max(counts.values())
            bott = " = ".join(k for k, v in counts.items() if v == top)
            t.append((f0(rate), name, ing, trn, tp, mem, max(tp, mem), sum(counts.values()),
                      bott))
            first_last.append((f0(rate), name, bott))
            if rows_n == models[-1][0]:
                big_kind.append((f0(rate), "memory" if mem > tp else "pushes and pulls"))
    lines += ["Processes needed (ceil of the event rate over the measured per-process rate; a "
              "shard's load is %.1f rows pulled and pushed per example; a shard is assumed to "
              "hold %d GiB of rows in DRAM, colder rows going to RocksDB at the (e) rate; "
              "the largest count is the bottleneck to scale first):" % (rpe, mem_gib), ""]
    lines += [table(["events/s", "model", "ingest", "trainers", "shards for pushes+pulls",
                     "shards for memory", "shards", "processes", "largest count"], t), ""]
    moves = "; ".join("%s events/s with %s: %s" % x for x in first_last)
    lines += ["Where the bottleneck moves (from the table): %s. Trainers scale with the event "
              "rate at %s examples/s each; a shard carries %s examples/s of pushes and pulls "
              "(top-k with error feedback cuts the push share, see Compression). For the %s "
              "model the shard count is set by %s at %s events/s and by %s at %s events/s. "
              "Serving is sized by request rate, not event rate: %s single-example requests/s "
              "per process." %
              (moves, f0(rates["trainer"]), f0(1 / shard_s_per_ex), models[-1][1],
               big_kind[0][1], big_kind[0][0], big_kind[-1][1], big_kind[-1][0],
               f0(rates.get("serve"))), ""]
    return lines


def gpu_section(res):
    """The CUDA backend: this run's backend_bench where it had a device, else the figures that
    scripts/gpu-check.sh measured on a machine with one (docs/bench/gpu-check.txt, committed)."""
    c = res.get("components", {}).get("backend", {})
    out = c.get("output", "")
    lines = ["## CUDA backend", ""]
    if out and "CUDA skipped" not in out and c.get("status") == "ok":
        lines += ["`bench/backend_bench` in this run (the compute step alone: forward+backward, "
                  "row norms and top-k selection, host arrays in and out):", "", "```",
                  out.strip(), "```", ""]
        return lines
    lines += ["This run had no usable CUDA device (`bench/backend_bench`: %s; its CPU figures "
              "are in the output at the end)." % c.get("status", "not run"), ""]
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "bench", "gpu-check.txt")
    try:
        with open(path, errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return lines + ["No `docs/bench/gpu-check.txt` either: the CUDA backend has no measured "
                        "figures.", ""]
    lines += ["The figures below were **not measured by this run**: they are the last "
              "`scripts/gpu-check.sh` run on a machine with a GPU (bundle built here with "
              "`-DSPARROW_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90`, run there: the GPU tests "
              "against the CPU oracle, compute-sanitizer, `bench/backend_bench 30`, and "
              "`sparrow trainer` end to end on 1,000,000 examples with an in-process shard), "
              "kept in `docs/bench/gpu-check.txt`. The CPU column there is the same machine's "
              "CPU, one core (the CPU backend is single-threaded); that machine's CPU timings "
              "varied by up to 2x between runs of the same build (a shared host), so read "
              "cuda/cpu as a rough ratio and the CUDA ms/step as the figure.", "", "```", text,
              "```", ""]
    return lines


def _rel(res, cmd):
    """A command line with the checkout's and the work directory's absolute paths shortened."""
    if res.get("work"):
        cmd = cmd.replace(res["work"], "$WORK")
    if res.get("root"):
        cmd = cmd.replace(res["root"] + "/", "")
    return cmd


def commands_section(res):
    lines = ["## Commands", "",
             "`%s` ran, in order (exit status, seconds). Studies' runs are listed one by one; "
             "the staleness study's K trainers of one run are listed once with `trainer.id=1` "
             "(the others differ in id and part file)." % res.get("argv", "bench/run_all"), ""]
    cmds = res.get("commands", [])
    main = [c for c in cmds if "benchmark" in c["what"] or "stream" in c["what"]]
    lines += ["```"] + ["%s    # %s, rc=%s, %.1f s" % (_rel(res, c["cmd"]), c["what"], c["rc"],
                                                         c["secs"]) for c in main] + ["```", ""]
    for s in ("modes", "scaling", "compression", "accumulation", "staleness", "deep",
              "freshness"):
        st = res.get("studies", {}).get(s, {})
        if st.get("command"):
            lines += ["%s study, per run: `%s`" % (s.capitalize(), _rel(res, st["command"])), ""]
    rest = [c for c in cmds if c not in main]
    if rest:
        lines += ["<details><summary>Every study run (%d commands)</summary>" % len(rest), "",
                  "```"]
        lines += ["%s    # %s, rc=%s, %.1f s" % (_rel(res, c["cmd"]), c["what"], c["rc"], c["secs"])
                  for c in rest]
        lines += ["```", "", "</details>", ""]
    return lines


def raw_section(res):
    lines = ["## Benchmark output as printed", ""]
    for name, c in res.get("components", {}).items():
        out = c.get("output")
        lines += ["### %s (%s)" % (name, c.get("status", "not run")), ""]
        if out:
            lines += ["```", out.strip()[-8000:], "```", ""]
        else:
            lines += ["No output.", ""]
    return lines


def write(res, out_path, log=print):
    """Writes the report and its plots; returns the names of tables that could not be made."""
    out_dir = os.path.dirname(os.path.abspath(out_path))
    plots = Plots(os.path.join(out_dir, "bench"), "bench")
    problems = []
    comp_rows, rates = component_rows(res)
    lines = header(res)
    body = []
    body += components_section(res, comp_rows)
    body += gpu_section(res)
    body += stream_section(res)
    mlines, mbest = modes_section(res, plots)
    body += mlines
    sclines, _ = scaling_section(res, plots)
    body += sclines
    slines, stale = staleness_section(res, plots)
    body += slines
    clines, comp = compression_section(res, plots)
    body += clines
    alines, acc = accumulation_section(res)
    body += alines
    body += deep_section(res)
    body += freshness_section(res)
    lines += body
    lines += choose_section(res, mbest, stale, comp, acc)
    lines += sizing_section(res, rates, comp)
    lines += commands_section(res)
    lines += raw_section(res)
    text = "\n".join(lines).rstrip() + "\n"
    for title in ("## Component benchmarks", "## Modes", "## Scaling", "## Staleness control",
                  "## Compression",
                  "## Gradient accumulation", "## Deep models", "## Freshness", "## How to choose", "## Sizing", "## Machine"):
        if title not in text:
            problems.append("table missing: " + title)
    with open(out_path, "w") as f:
        f.write(text)
    for e in plots.errors:
        log("plot not drawn (not an error of the run): " + e)
    return problems


if __name__ == "__main__":
    import json
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "BENCHMARKS.md")
    with open(os.path.join(sys.argv[1], "results.json")) as fh:
        r = json.load(fh)
    sys.exit(1 if write(r, out) else 0)
