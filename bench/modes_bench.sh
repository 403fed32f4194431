#!/usr/bin/env bash
# modes_bench: the clock modes and staleness penalties on the same stream. 4 trainers and 2 shards
# on this machine, trainer 3 slowed 2x (trainer.debug.slow_factor=2), each configuration a
# `sparrow launch` run of the same --seed and --examples until drained: sync (the baseline),
# async with penalty none, async with inverse, ssp:4, hybrid:100. Prints a Markdown table:
# examples/s (examples trained between the first 100 ms sample that saw any and the first that saw
# all N, over that time) and its ratio to sync's,
# final window logloss and AUC (mean over trainers), the gap to the Bayes-optimal logloss, the
# staleness tau p50/p99 (the shards' histogram, bucket bounds), and the checkpoint pause the
# trainers saw (p50/p99, bucket bounds). --csv FILE also writes the rows as CSV.
# The stream is produced before the trainers start (launch --backlog), so the trainers, not the
# generator, set the pace; the topic has enough partitions that the whole stream stays inside the
# Kafka mock's retention window (about 5 MB per partition).
# Usage: bench/modes_bench.sh <build dir> [--quick] [--csv FILE] [--keep]
set -euo pipefail
BUILD=${1:?usage: modes_bench.sh <build dir> [--quick] [--csv FILE] [--keep]}
shift
SPARROW=$BUILD/sparrow
[ -x "$SPARROW" ] || { echo "modes_bench: $SPARROW not built" >&2; exit 1; }
EXAMPLES=240000
PARTITIONS=64
TIMEOUT=150
CSV=""
KEEP=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) EXAMPLES=40000 PARTITIONS=16 TIMEOUT=90 ;;
    --csv) CSV=${2:?--csv FILE}; shift ;;
    --keep) KEEP=1 ;;
    *) echo "modes_bench: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/modes_bench.XXXXXX")
FAILED=0
# the runs' directories stay when asked to or when a run failed
trap '[ "$KEEP" = 1 ] || [ "$FAILED" = 1 ] || rm -rf "$TMP"' EXIT

# name mode penalty
CONFIGS=(
    "sync sync inverse"
    "async-none async none"
    "async-inverse async inverse"
    "ssp4 ssp:4 inverse"
    "hybrid100 hybrid:100 inverse"
)
echo "modes_bench: $EXAMPLES examples (seed 7, drift 0.5), 4 trainers (trainer 3 slowed 2x)," \
    "2 shards, $PARTITIONS partitions, stream produced first, checkpoints every 5 s; runs under $TMP"
for c in "${CONFIGS[@]}"; do
    read -r name mode penalty <<<"$c"
    echo "modes_bench: $name (--mode $mode --penalty $penalty) ..." >&2
    rc=0
    "$SPARROW" launch --quiet --run-dir "$TMP/$name" --trainers 4 --shards 2 \
        --partitions "$PARTITIONS" --mode "$mode" --penalty "$penalty" --slow 3:2 --seed 7 \
        --examples "$EXAMPLES" --rate 1000000 --backlog --checkpoint-interval 5s \
        --set coordinator:coordinator.member.timeout=60s --duration "$TIMEOUT" --samples-ms 100 \
        >"$TMP/$name.out" 2>&1 || rc=$?
    grep '^launch summary' "$TMP/$name.out" >&2 || tail -5 "$TMP/$name.out" >&2
    if [ "$rc" -ne 0 ]; then
        FAILED=1
        echo "modes_bench: $name FAILED (exit $rc); logs under $TMP/$name (kept)" >&2
    fi
done

python3 - "$TMP" "$CSV" "${CONFIGS[@]}" <<'PY'
import csv, json, math, sys
tmp, csv_path, configs = sys.argv[1], sys.argv[2], [c.split() for c in sys.argv[3:]]
def num(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None
rows = []
for name, mode, penalty in configs:
    try:
        s = json.load(open(f"{tmp}/{name}/summary.json"))
    except (OSError, ValueError):
        s = {}
    ck = s.get("checkpoint", {})
    st = s.get("staleness", {})
    ll, bll = num(s.get("window_logloss")), num(s.get("bayes_logloss"))
    rows.append({
        "config": name, "mode": mode, "penalty": penalty,
        "ok": bool(s.get("ok")) and bool(s.get("drained")),
        "ex_per_s": num(s.get("train_ex_per_s")),
        "window_logloss": ll, "window_auc": num(s.get("window_auc")),
        "bayes_logloss": bll, "bayes_auc": num(s.get("bayes_auc")),
        "gap_to_bayes": ll - bll if ll is not None and bll is not None else None,
        "tau_p50": num(st.get("p50")), "tau_p99": num(st.get("p99")),
        "pause_p50_s": num(ck.get("pause_p50_s")), "pause_p99_s": num(ck.get("pause_p99_s")),
        "examples_produced": num(s.get("examples_produced")),
        "manifest_examples": num(ck.get("manifest_example_count")),
        "duration_s": num(s.get("duration_s")),
    })
base = rows[0]["ex_per_s"] if rows[0]["ok"] else None
for r in rows:
    ok = base and r["ok"] and r["ex_per_s"] is not None
    r["ratio_vs_sync"] = r["ex_per_s"] / base if ok else None
def f(v, fmt):
    return "-" if v is None else format(v, fmt)
print()
print("| mode | penalty | ex/s | vs sync | window logloss | AUC | gap to Bayes | tau p50/p99 "
      "| ckpt pause p50/p99 (s) | drained |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    print(f"| {r['mode']} | {r['penalty']} | {f(r['ex_per_s'], '.0f')} "
          f"| {f(r['ratio_vs_sync'], '.2f')} | {f(r['window_logloss'], '.4f')} "
          f"| {f(r['window_auc'], '.4f')} | {f(r['gap_to_bayes'], '+.4f')} "
          f"| {f(r['tau_p50'], 'g')}/{f(r['tau_p99'], 'g')} "
          f"| {f(r['pause_p50_s'], 'g')}/{f(r['pause_p99_s'], 'g')} "
          f"| {'yes' if r['ok'] else 'NO'} |")
if not all(r["ok"] for r in rows):
    print("\nA run that did not drain (see its launch summary above) has no ratio; its other "
          "figures are what it measured before it failed.")
if rows and rows[0]["ok"] and rows[0]["bayes_logloss"] is not None:
    print(f"\nBayes-optimal window logloss {rows[0]['bayes_logloss']:.4f}, "
          f"AUC {f(rows[0]['bayes_auc'], '.4f')} (mean over trainers, sync run).")
if csv_path:
    cols = ["config", "mode", "penalty", "ok", "ex_per_s", "ratio_vs_sync", "window_logloss",
            "window_auc", "bayes_logloss", "bayes_auc", "gap_to_bayes", "tau_p50", "tau_p99",
            "pause_p50_s", "pause_p99_s", "examples_produced", "manifest_examples", "duration_s"]
    with open(csv_path, "w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else r[k]) for k in cols})
    print(f"\nrows written to {csv_path}")
PY
