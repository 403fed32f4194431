#!/usr/bin/env bash
# A shard checkpoints, is killed with -9, restarts from the checkpoint with bit-identical rows and
# optimizer state (continuing identically), skips a corrupt newer checkpoint, serves
# /metrics /healthz /readyz, and stops cleanly on SIGTERM.
set -euo pipefail
SPARROW=$1
DIR=$2
CLIENT=$3
DIM=8
NKEYS=30000
rm -rf "$DIR"
mkdir -p "$DIR"
. "$(dirname "$0")/pserver_lib.sh"
trap 'kill -9 $PS_PID 2>/dev/null || true' EXIT

HTTP_PORT=$(free_port)
ARGS=(--data-dir "$DIR/data" --dim $DIM --optimizer adam --memory-mb 1 --http-port "$HTTP_PORT"
      --set pserver.staleness.penalty=exp:0.9)

start_ps ps0 "${ARGS[@]}"
"$CLIENT" "$PS_EP" $DIM train 1 40 $NKEYS 1 || fail "train 1"
"$CLIENT" "$PS_EP" $DIM checkpoint 1 | grep -q '^ok ' || fail "checkpoint 1"
"$CLIENT" "$PS_EP" $DIM dump $NKEYS "$DIR/a.bin" || fail "dump a"

# HTTP endpoints
curl -sf "http://127.0.0.1:$HTTP_PORT/healthz" >/dev/null || fail "healthz"
curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null || fail "readyz"
curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" >"$DIR/metrics.txt" || fail "metrics"
for m in sparrow_ps_rows sparrow_ps_memory_bytes sparrow_ps_requests_total \
         sparrow_ps_staleness_bucket sparrow_ps_evictions_total sparrow_ps_checkpoint_bytes; do
    grep -q "^$m" "$DIR/metrics.txt" || fail "metric $m missing"
done

# more training, then a crash: the restart must show exactly the epoch-1 rows
"$CLIENT" "$PS_EP" $DIM train 2 20 $NKEYS 1 || fail "train 2"
kill -9 $PS_PID
wait $PS_PID 2>/dev/null || true
start_ps ps1 "${ARGS[@]}"
"$CLIENT" "$PS_EP" $DIM dump $NKEYS "$DIR/b.bin" || fail "dump b"
cmp -s "$DIR/a.bin" "$DIR/b.bin" || fail "restored rows differ from the checkpoint"

# continuing from the restored state is deterministic (optimizer slots and versions restored)
"$CLIENT" "$PS_EP" $DIM train 3 20 $NKEYS 1 || fail "train 3"
"$CLIENT" "$PS_EP" $DIM dump $NKEYS "$DIR/c.bin" || fail "dump c"
kill -9 $PS_PID
wait $PS_PID 2>/dev/null || true
start_ps ps2 "${ARGS[@]}"
"$CLIENT" "$PS_EP" $DIM train 3 20 $NKEYS 1 || fail "train 3 again"
"$CLIENT" "$PS_EP" $DIM dump $NKEYS "$DIR/d.bin" || fail "dump d"
cmp -s "$DIR/c.bin" "$DIR/d.bin" || fail "continuation after restore is not bit-identical"

# a newer checkpoint that is corrupt is skipped
"$CLIENT" "$PS_EP" $DIM checkpoint 2 | grep -q '^ok ' || fail "checkpoint 2"
sst=$(ls "$DIR/data/checkpoints/2/shard-0/"*.sst | head -1)
cp "$sst" "$sst.tmp" && rm "$sst" && printf 'garbage' >>"$sst.tmp" && mv "$sst.tmp" "$sst"
kill -9 $PS_PID
wait $PS_PID 2>/dev/null || true
start_ps ps3 "${ARGS[@]}"
grep -q 'skipping checkpoint' "$DIR/ps3.log" || fail "corrupt checkpoint not reported"
"$CLIENT" "$PS_EP" $DIM dump $NKEYS "$DIR/e.bin" || fail "dump e"
cmp -s "$DIR/a.bin" "$DIR/e.bin" || fail "did not fall back to checkpoint 1"

# SIGTERM: clean exit
kill -TERM $PS_PID
for _ in $(seq 1 100); do
    kill -0 $PS_PID 2>/dev/null || break
    sleep 0.1
done
if kill -0 $PS_PID 2>/dev/null; then fail "still running 10 s after SIGTERM"; fi
wait $PS_PID || fail "non-zero exit after SIGTERM"
echo "pserver_restart: ok"
