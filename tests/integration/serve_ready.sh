#!/usr/bin/env bash
# Readiness is exact: `sparrow serve` reports ready only once its position in every partition of
# model-updates reached the high watermark read at start. Updates are produced before serve
# starts; the first time /readyz answers 200, every one of them must already be applied (the
# counter is read after readiness, so no timing is involved). Then the same with a checkpoint
# whose manifest offsets lie mid-stream: ready implies exactly the updates after them applied.
# usage: serve_ready.sh SPARROW DIR SERVE_DRIVER
set -euo pipefail
SPARROW=$1
DIR=$2
DRIVER=$3
rm -rf "$DIR" && mkdir -p "$DIR"
cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
N=6000
"$SPARROW" kafka-mock --topic model-updates:3 --port-file bs </dev/null >/dev/null 2>mock.log &
PIDS+=($!)
for _ in $(seq 200); do [ -s bs ] && break; sleep 0.1; done
BS=$(cat bs)
python3 -c "
for k in range(1, $N + 1):
    print('put %d 1 1 0 %s' % (k, ' '.join('%.3f' % ((k * 7 + d) % 100 / 1000) for d in range(4))))
" | "$DRIVER" produce "$BS" model-updates 2>produce.log || fail "produce"

# counter NAME LABELS PORT: a metric's value from serve's /metrics
counter() {
    curl -sf "http://127.0.0.1:$3/metrics" | awk -v m="$1$2" '$1 == m {printf "%d", $2}'
}
# start_serve NAME ARGS...: starts serve, waits for its port and then for /readyz = 200
start_serve() {
    local name=$1
    shift
    "$SPARROW" serve --brokers "$BS" --port 0 --port-file "$name.port" \
        --set serve.log.dir="$DIR" "$@" >"$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 600); do [ -s "$name.port" ] && break; sleep 0.1; done
    [ -s "$name.port" ] || fail "$name did not start"
    PORT=$(cat "$name.port")
    for _ in $(seq 1200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")" = 200 ] && return
        sleep 0.05
    done
    fail "$name never became ready"
}

# 1. No checkpoint: from the beginning of every partition.
start_serve empty
applied=$(counter sparrow_serve_updates_total '{kind="row"}' "$PORT")
[ "$applied" = "$N" ] || fail "ready with $applied of $N updates applied"
grep -q "catch-up target" empty.log || fail "no catch-up targets logged"
sum=$(grep -o "catch-up target partition=[0-9]* high_watermark=[0-9]*" empty.log |
    awk -F= '{s += $3} END {print s}')
[ "$sum" = "$N" ] || fail "catch-up targets sum to $sum, expected $N"

# 2. A checkpoint (keys 1..10) whose offsets are mid-stream: half of each partition's records.
offs=""
skipped=0
for p in 0 1 2; do
    hw=$(grep -o "catch-up target partition=$p high_watermark=[0-9]*" empty.log | cut -d= -f3)
    half=$((hw / 2))
    skipped=$((skipped + half))
    offs="$offs${offs:+,}$p:$half"
done
mkdir ck
python3 -c "
for k in range(1, 11):
    print('%d 0.5 0.5 0.5 0.5' % k)
" | "$DRIVER" checkpoint ck 1 4 model-updates "$offs" || fail "checkpoint"
start_serve ckpt --checkpoint-dir ck
applied=$(counter sparrow_serve_updates_total '{kind="row"}' "$PORT")
[ "$applied" = $((N - skipped)) ] ||
    fail "ready with $applied updates applied after the checkpoint, expected $((N - skipped))"
echo "serve_ready: ok (ready after all $N updates; from a checkpoint after exactly $((N - skipped)))"
