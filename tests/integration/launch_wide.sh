#!/usr/bin/env bash
# `sparrow launch` at the sizes of the scaling study: 16 trainers and 16 shards (34 processes)
# start, every trainer gets partitions, a finite stream of 8000 examples drains to exactly 8000 in
# the LATEST manifest, summary.json and samples.csv name every trainer and every shard, and every
# process stops with exit 0. Nothing is timed: --duration is only a timeout.
# usage: launch_wide.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out.txt" "$DIR/run/coordinator.log" "$DIR/run/trainer-0.log" "$DIR/run/shard-15.log")
FAIL_TAIL=15

timeout 250 "$SPARROW" launch --trainers 16 --shards 16 --partitions 16 --examples 8000 \
    --rate 1000000 --checkpoint-interval 2s --duration 200 --samples-ms 200 \
    --run-dir "$DIR/run" >"$DIR/out.txt" 2>&1 || fail "launch exit status"
cat "$DIR/out.txt"
grep -q "^launch summary: ok .* trainers=16 shards=16 " "$DIR/out.txt" || fail "no ok summary line"
summary_check "$DIR/run" <<'PY'
want(s["ok"] and s["drained"], "not ok/drained")
want(s["trainers"] == 16 and s["shards"] == 16 and s["partitions"] == 16, "trainers/shards")
want(s["examples_produced"] == 8000, "examples_produced != 8000")
want(s["checkpoint"]["manifest_example_count"] == 8000, "manifest example_count != 8000")
want([t["name"] for t in s["per_trainer"]] == ["trainer-%d" % i for i in range(16)], "per_trainer")
want(sum(t["examples"] for t in s["per_trainer"]) >= 8000, "per-trainer examples")
names = {p["name"]: p["exit"] for p in s["processes"]}
want(len(names) == 16 + 16 + 3, "process count %d" % len(names))
for i in range(16):
    want(names.get("trainer-%d" % i) == "exit 0", "trainer-%d exit" % i)
    want(names.get("shard-%d" % i) == "exit 0", "shard-%d exit" % i)
want(all(v == "exit 0" for v in names.values()), "exit statuses")
want(s["staleness"]["count"] > 0, "no staleness histogram")
st = s["staleness"]
want(st["sum"] >= 0 and abs(st["mean"] - st["sum"] / st["count"]) < 1e-9, "staleness sum/mean")
want(all(t["coord_wait_s"] is not None and t["coord_wait_s"] >= 0 for t in s["per_trainer"]),
     "per-trainer coord_wait_s")
rows = [l.split(",") for l in open(d + "/samples.csv").read().split("\n")[1:] if l]
want({r[1] for r in rows} == {str(i) for i in range(16)}, "samples.csv trainers")
# every trainer was assigned partitions (16 partitions, 16 trainers: one each)
for i in range(16):
    log = open("%s/trainer-%d.log" % (d, i), errors="replace").read()
    want("kafka partition assigned" in log, "trainer-%d never assigned a partition" % i)
PY
echo "launch_wide: ok"
