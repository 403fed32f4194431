#!/usr/bin/env python3
"""Freshness study (issue 20 §6): event time to visible in serving, against the shards' publish
interval, and what the update stream costs at each interval.

For each pserver.publish.interval, `sparrow launch --serve` (the Kafka mock, 2 shards, the
coordinator, the generator at RATE examples/s, 2 CPU trainers, serve) starts; the study waits until
the pipeline is steady (every trainer holds partitions of the examples topic and serve the update
stream's, each has read up to their end, twice in a row half a second apart: the Kafka groups have
formed and the backlog of events produced while they formed is trained), lets it run WARM seconds
more, then scrapes serve's /metrics and both shards' /metrics, waits WINDOW seconds and scrapes
again. (A fixed wait from the start measured the group's formation instead when it was slow: one
run in six here took 8 s to form the group, and its window held the 8 s backlog: p50 5 s.) Over
that window, from the differences:
- serve's sparrow_serve_freshness_seconds histograms (stages event_to_shard, shard_to_visible,
  event_to_visible): updates observed and p50/p99 (the upper bound of the bucket holding the
  quantile, which is what a histogram can say);
- the shards' sparrow_ps_published_total{kind="row"} and sparrow_ps_published_bytes_total, summed
  over the shards: rows and bytes per second the update stream carries (coalescing: a row that
  changes again within an interval is published once, so rows/s falls as the interval grows);
- the trainers' examples trained per second (launch's summary), to show the interval costs the
  training nothing;
- steady_s: seconds from the launch's start until the pipeline was steady.

The window measures the steady state; how long a start takes is steady_s.

Standalone: bench/study_freshness.py BUILD_DIR [--quick] [--json FILE]"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report_lib as rl  # noqa: E402

STAGES = ("event_to_shard", "shard_to_visible", "event_to_visible")
SIZES = {False: {"intervals": ["1s", "500ms", "250ms", "100ms"], "steady_max": 20, "warm": 4,
                 "window": 20, "rate": 3000},
         True: {"intervals": ["1s", "250ms"], "steady_max": 15, "warm": 3, "window": 6,
                "rate": 2000}}
SHARDS, TRAINERS = 2, 2


def scrape(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            return r.read().decode("utf-8", "replace")
    except OSError:
        return None


def counter(text, name, labels=""):
    """Sum of a counter's samples in a /metrics text whose labels hold `labels`."""
    total = 0.0
    for ln in text.splitlines():
        if (ln.startswith(name + " ") or ln.startswith(name + "{")) and labels in ln:
            total += float(ln.split()[-1])
    return total


def stage_hist(text, stage):
    """Buckets of one stage of serve's freshness histogram: [(le, cumulative count)]."""
    buckets = {}
    pat = re.compile(r'^sparrow_serve_freshness_seconds_bucket\{(.*)\} (\S+)$')
    for ln in text.splitlines():
        m = pat.match(ln)
        if m and 'stage="%s"' % stage in m.group(1):
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            le = float("inf") if le == "+Inf" else float(le)
            buckets[le] = float(m.group(2))
    return sorted(buckets.items())


def hist_diff(a, b):
    da = dict(a)
    return [(le, c - da.get(le, 0.0)) for le, c in b]


def role_ports(run_dir, role, n, deadline):
    """The HTTP ports of ROLE-0 .. ROLE-(n-1) (pserver: shard-i.log), from their logs."""
    ports = {}
    while len(ports) < n and time.monotonic() < deadline:
        for i in range(n):
            try:
                with open(os.path.join(run_dir, "%s-%d.log" % (role, i))) as f:
                    m = re.search(r" http endpoint port=(\d+)", f.read())
                if m:
                    ports[i] = int(m.group(1))
            except OSError:
                pass
        time.sleep(0.2)
    return [ports[i] for i in sorted(ports)]


def caught_up(text):
    """A consumer's /metrics (a trainer's, serve's): it holds partitions and its consumer lag is at
    most one record per partition (records, from its last fetch)."""
    if not text:
        return False
    parts = counter(text, "sparrow_kafka_assigned_partitions")
    return parts >= 1 and counter(text, "sparrow_kafka_consumer_lag") <= parts


def wait_steady(ports, deadline, p):
    """Waits until every consumer (HTTP ports) is caught up in two scrapes 0.5 s apart; False at
    the deadline or when the launch (p) exits."""
    ok_before = False
    while time.monotonic() < deadline and p.poll() is None:
        ok = all(caught_up(scrape(x)) for x in ports)
        if ok and ok_before:
            return True
        ok_before = ok
        time.sleep(0.5)
    return False


def one_run(rec, sparrow, work, interval, size, sets=()):
    run_dir = os.path.join(work, "fresh-%s" % interval)
    shutil.rmtree(run_dir, ignore_errors=True)
    duration = size["steady_max"] + size["warm"] + size["window"] + 4
    argv = [sparrow, "launch", "--serve", "--run-dir", run_dir, "--shards", SHARDS,
            "--trainers", TRAINERS, "--rate", size["rate"], "--duration", duration,
            "--set", "pserver:pserver.publish.interval=%s" % interval]
    for x in sets:
        argv += ["--set", x]
    row = {"interval": interval, "rate": size["rate"], "window_s": size["window"]}
    log = os.path.join(work, "fresh-%s.log" % interval)
    t0 = time.monotonic()
    p = rl.spawn(argv, log)
    try:
        serve = None
        while serve is None and time.monotonic() < t0 + 60 and p.poll() is None:
            with open(log) as f:
                m = re.search(r"serve on http://127\.0\.0\.1:(\d+)", f.read())
            serve = int(m.group(1)) if m else None
            time.sleep(0.2)
        shards = role_ports(run_dir, "shard", SHARDS, t0 + 60)
        trainers = role_ports(run_dir, "trainer", TRAINERS, t0 + 60)
        if serve is None or len(shards) != SHARDS or len(trainers) != TRAINERS:
            row["why"] = "launch did not report the ports of serve, the shards and the trainers; " \
                         "read " + log
            return row
        if not wait_steady(trainers + [serve], t0 + size["steady_max"], p):
            row["why"] = "not steady (the trainers and serve assigned and caught up) %d s after " \
                         "the start; read %s" % (size["steady_max"], log)
            return row
        row["steady_s"] = round(time.monotonic() - t0, 1)
        time.sleep(size["warm"])
        s0, p0 = scrape(serve), [scrape(x) for x in shards]
        time.sleep(size["window"])
        s1, p1 = scrape(serve), [scrape(x) for x in shards]
        if not s0 or not s1 or not all(p0) or not all(p1):
            row["why"] = "a /metrics scrape failed; read " + log
            return row
        for st in STAGES:
            d = hist_diff(stage_hist(s0, st), stage_hist(s1, st))
            row[st] = {"n": int(d[-1][1]) if d else 0, "p50": rl.hist_quantile(d, 0.5),
                       "p99": rl.hist_quantile(d, 0.99)}
        rows = sum(counter(b, "sparrow_ps_published_total", 'kind="row"') -
                   counter(a, "sparrow_ps_published_total", 'kind="row"') for a, b in zip(p0, p1))
        byts = sum(counter(b, "sparrow_ps_published_bytes_total") -
                   counter(a, "sparrow_ps_published_bytes_total") for a, b in zip(p0, p1))
        row["rows_per_s"] = round(rows / size["window"], 1)
        row["bytes_per_s"] = round(byts / size["window"], 1)
    finally:
        try:
            rc = p.wait(timeout=duration + 60)
        except subprocess.TimeoutExpired:
            rl.kill_group(p)
            rc = p.wait()
        rec.record(argv, rc, time.monotonic() - t0, "freshness study: interval %s" % interval)
    row["rc"] = rc
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            row["train_ex_per_s"] = json.load(f).get("train_ex_per_s")
    except (OSError, ValueError):
        pass
    if rc != 0 and "why" not in row:
        row["why"] = "sparrow launch exited %s; read %s" % (rc, log)
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


def run(rec, sparrow, work, quick):
    size = SIZES[bool(quick)]
    out = {"quick": bool(quick), "rows": [], "failures": [], "rate": size["rate"],
           "window_s": size["window"], "warm_s": size["warm"], "steady_max_s": size["steady_max"],
           "command": "sparrow launch --serve --shards %d --trainers %d --rate %d --set "
                      "pserver:pserver.publish.interval=INTERVAL" % (SHARDS, TRAINERS,
                                                                     size["rate"])}
    for interval in size["intervals"]:
        r = one_run(rec, sparrow, work, interval, size)
        out["rows"].append(r)
        if r.get("why"):
            out["failures"].append("interval %s: %s" % (interval, r["why"]))
        ev = r.get("event_to_visible") or {}
        why = " (%s)" % r["why"] if r.get("why") else ""
        rec.note("freshness: interval %s: steady after %s s; event->visible p50 %s p99 %s s, "
                 "%s rows/s, %s B/s%s" % (interval, r.get("steady_s"), ev.get("p50"),
                                          ev.get("p99"), r.get("rows_per_s"),
                                          r.get("bytes_per_s"), why))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    rec = rl.Recorder(log=lambda m: print(m, file=sys.stderr, flush=True))
    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), "study_freshness.%d" % os.getpid())
    os.makedirs(work, exist_ok=True)
    try:
        res = run(rec, os.path.join(build, "sparrow"), work, "--quick" in sys.argv)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(res, indent=1)
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            f.write(text)
    else:
        print(text)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
