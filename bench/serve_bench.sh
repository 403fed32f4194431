#!/usr/bin/env bash
# serve_bench: requests/s and p50/p99 latency of `sparrow serve` holding ROWS rows (FM, k = 8),
# measured with wrk on loopback: single-example requests of 39 features, then batches of 64.
# usage: bench/serve_bench.sh SPARROW SERVE_DRIVER [ROWS (default 1000000)] [SECONDS (default 20)]
# (SERVE_DRIVER is build/tests/integration/serve_driver; wrk comes from scripts/install-deps.sh.)
# Freshness under training is read from a running demo's /metrics
# (sparrow_serve_freshness_seconds{stage="event_to_visible"}).
set -euo pipefail
SPARROW=$(realpath "$1")
DRIVER=$(realpath "$2")
ROWS=${3:-1000000}
SECS=${4:-20}
command -v wrk >/dev/null || { echo "wrk not installed (scripts/install-deps.sh)"; exit 1; }
DIR=$(mktemp -d /tmp/serve_bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT
cd "$DIR"
"$SPARROW" kafka-mock --topic model-updates:3 --port-file bs </dev/null >/dev/null 2>mock.err &
PIDS+=($!)
for _ in $(seq 100); do [ -s bs ] && break; sleep 0.1; done
BS=$(cat bs)
echo "writing a checkpoint of $ROWS rows"
mkdir ck
python3 -c "
import random, sys
r = random.Random(1)
out = sys.stdout
for k in range($ROWS):
    out.write('%d %s\n' % (k, ' '.join('%.4f' % r.uniform(-0.1, 0.1) for _ in range(9))))
" | "$DRIVER" checkpoint ck 1 9 model-updates 0:0,1:0,2:0
"$SPARROW" serve --checkpoint-dir ck --brokers "$BS" --port 0 --port-file port \
    --set serve.log.dir="$DIR" --set log.level=warn 2>serve.err &
PIDS+=($!)
for _ in $(seq 600); do [ -s port ] && break; sleep 0.1; done
PORT=$(cat port)
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done
python3 - "$ROWS" <<'PY'
import json, random, sys
rows = int(sys.argv[1]); r = random.Random(2)
def ex(): return {"keys": [str(r.randrange(rows)) for _ in range(39)]}
json.dump(ex(), open("single.json", "w"))
json.dump({"examples": [ex() for _ in range(64)]}, open("batch.json", "w"))
PY
for kind in single batch; do
    cat >"$kind.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$DIR/$kind.json"); wrk.body = f:read("*a"); f:close()
done = function(summary, latency, requests)
  io.write(string.format("$kind: %.0f requests/s p50 %.2f ms p99 %.2f ms errors %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect +
    summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
    wrk -t2 -c16 -d"${SECS}s" --latency -s "$kind.lua" "http://127.0.0.1:$PORT/v1/predict" |
        tail -1
done
