#!/usr/bin/env python3
"""bench/recovery_bench (issue 17 section 3): what a trainer failure costs under each
coordinator.recovery policy.

Three `sparrow launch` runs of the same stream (3 trainers, 6 partitions, 2 shards, async,
checkpoints every 2 s, --examples N, drained to the end):
  baseline  no kills
  rollback  KILLS kill -9 of a random trainer (each restarted 500 ms later): every removal, join
            and moved partition rolls every shard and trainer back to LATEST (exactly-once)
  continue  the same kills under coordinator.recovery=continue: nothing rolls back, the dead
            trainer's partitions resume from LATEST on their next owner (at-least-once)
Figures per policy:
  retrained_per_kill  examples trained since LATEST that were trained again, per kill: the sum of
                      `retrained=` of the coordinator's "recovery started" (rollback: everyone's
                      work since LATEST) and "... without rollback" (continue: the dead trainer's)
                      lines and the trainers' "partition moved away" lines (continue: a live
                      trainer's partitions moved to the restarted one), over the kills
  recover_s           per kill, from the kill (chaos.log) to the last recovery event before the
                      next kill or the end: "recovery completed" (rollback) or a trainer's
                      "partition taken over from LATEST" (continue), i.e. until every partition is
                      trained again; the mean over kills. It includes the Kafka group's rebalance
                      (the restarted trainer's join; kafka.session.timeout.ms for the dead member)
  trained (twice)     examples the trainers trained, and how many more than produced: under
                      rollback the work a recovery threw away, under continue the examples that
                      are in the model twice (at-least-once), whose weight shows in the held-out
                      logloss and calibration
  heldout             the held-out logloss of the drained run's LATEST checkpoint (`sparrow eval
                      --checkpoint`) on H examples that follow the N trained ones in the same
                      generator stream (same seed, fields, latent dimension and drift), and its
                      ratio to the no-kill baseline's in the same invocation; the constant
                      predictor and Bayes on the same examples beside it. (The progressive window
                      logloss is no measure here: under continue the re-trained examples were
                      already learned, so it reads below Bayes.)
usage: bench/recovery_bench.py BUILD_DIR [--quick] [--examples N] [--kills K]
  default N = 60000, K = 10, H = 20000; --quick: N = 9000, K = 2, H = 5000 (about 25 s per run).
Exit status 0 when every run completed (figures are reported, not judged); 1 on error."""

import datetime
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import pbwire  # noqa: E402

SEED, FIELDS, LATENT, DRIFT = 7, 39, 4, 0.5  # `sparrow launch`'s generator (tools/src/pipeline.c)


def ts(line):
    """Seconds since the epoch of a log line's leading ISO timestamp, or None."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    if not m:
        return None
    d = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def launch(sparrow, run_dir, n, kills, policy, quick):
    argv = [sparrow, "launch", "--run-dir", run_dir, "--trainers", "3", "--partitions", "6",
            "--shards", "2", "--mode", "async", "--examples", str(n), "--seed", str(SEED),
            "--drift", str(DRIFT),
            "--rate", "2000" if quick else "4000", "--checkpoint-interval", "2s", "--no-serve",
            "--quiet", "--duration", "400",
            "--set", "trainer:kafka.session.timeout.ms=6000",
            "--set", "trainer:kafka.heartbeat.interval.ms=500",
            "--set", "coordinator:coordinator.recovery=" + policy]
    if kills:
        argv += ["--kill", "trainer", "--kills", str(kills), "--kill-interval",
                 "1000:2000" if quick else "3000:5000", "--restart-after", "500",
                 "--chaos-seed", "11"]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:])
        raise SystemExit("recovery_bench: sparrow launch failed (%s), see %s" % (policy, run_dir))
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def held_out(sparrow, work, n, h):
    """The H examples after the first N of the launches' stream, as a pb file."""
    path = os.path.join(work, "stream.pb")
    subprocess.run([sparrow, "gen", "--n", str(n + h), "--seed", str(SEED), "--fields",
                    str(FIELDS), "--latent-dim", str(LATENT), "--drift", str(DRIFT), "--format",
                    "pb", "--out", path], check=True, stderr=subprocess.DEVNULL)
    held = os.path.join(work, "held.pb")
    with open(held, "wb") as f:
        for rec in pbwire.records(path)[n:]:
            f.write(pbwire.put_varint(len(rec)) + rec)
    return held


def evaluate(sparrow, run_dir, held):
    """sparrow eval --json of the run's LATEST checkpoint on the held-out file."""
    r = subprocess.run([sparrow, "eval", "--checkpoint", run_dir, "--in", "file:" + held,
                        "--json"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit("recovery_bench: sparrow eval failed on %s: %s" % (run_dir, r.stderr))
    return json.loads(r.stdout)


def figures(run_dir, policy):
    coord = open(os.path.join(run_dir, "coordinator.log"), errors="replace").read().splitlines()
    t0 = ts(coord[0]) if coord else 0.0
    retrained = 0
    for line in coord:
        m = re.search(r" retrained=(\d+)", line)
        if m and ("recovery started" in line or "without rollback" in line):
            retrained += int(m.group(1))
    for path in glob.glob(os.path.join(run_dir, "trainer-*.log")):
        for line in open(path, errors="replace"):
            m = re.search(r"partition moved away .* retrained=(\d+)", line)
            if m:  # continue: a live trainer's partitions moved to a restarted one
                retrained += int(m.group(1))
    kills = []
    for line in open(os.path.join(run_dir, "chaos.log"), errors="replace"):
        m = re.match(r"t=([\d.]+)s kill", line)
        if m:
            kills.append(t0 + float(m.group(1)))  # chaos times count from the launch's start
    events = []
    if policy == "rollback":
        events = [ts(x) for x in coord if "recovery completed" in x]
    else:
        for path in glob.glob(os.path.join(run_dir, "trainer-*.log")):
            events += [ts(x) for x in open(path, errors="replace")
                       if "partition taken over from LATEST" in x]
    events = sorted(e for e in events if e is not None)
    rec = []
    for i, k in enumerate(kills):
        end = kills[i + 1] if i + 1 < len(kills) else float("inf")
        after = [e for e in events if k <= e < end]
        if after:
            rec.append(after[-1] - k)
    return retrained, rec


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 1
    build = args[0]
    quick = "--quick" in args
    n = 9000 if quick else 60000
    kills = 2 if quick else 10
    h = 5000 if quick else 20000
    if "--examples" in args:
        n = int(args[args.index("--examples") + 1])
    if "--kills" in args:
        kills = int(args[args.index("--kills") + 1])
    sparrow = os.path.join(build, "sparrow")
    work = tempfile.mkdtemp(prefix="recovery_bench.")
    held = held_out(sparrow, work, n, h)
    base = launch(sparrow, os.path.join(work, "baseline"), n, 0, "rollback", quick)
    b = evaluate(sparrow, os.path.join(work, "baseline"), held)
    print("recovery_bench: baseline: kills=0 examples=%d heldout=%.4f (const %.4f, bayes %.4f; "
          "%d held-out examples) ex_per_s=%.0f"
          % (n, b["logloss"], b["const_logloss"], b["bayes_logloss"], b["examples"],
             base["ex_per_s"]))
    for policy in ("rollback", "continue"):
        rd = os.path.join(work, policy)
        s = launch(sparrow, rd, n, kills, policy, quick)
        e = evaluate(sparrow, rd, held)
        retrained, rec = figures(rd, policy)
        k = s.get("chaos", {}).get("kills", kills) or 1
        print("recovery_bench: %s: kills=%d retrained_per_kill=%.0f recover_s=%.2f "
              "(max %.2f, %d of %d kills measured) heldout=%.4f (no kills %.4f) ratio %.3f "
              "manifest_examples=%.0f trained=%d (twice: %d) calibration=%.3f ex_per_s=%.0f"
              % (policy, k, retrained / k, sum(rec) / len(rec) if rec else float("nan"),
                 max(rec) if rec else float("nan"), len(rec), k, e["logloss"], b["logloss"],
                 e["logloss"] / b["logloss"], s["checkpoint"]["manifest_example_count"],
                 s["examples_trained"], s["examples_trained"] - n, e["calibration"],
                 s["ex_per_s"]))
    print("recovery_bench: runs under %s" % work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
