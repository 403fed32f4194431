#!/usr/bin/env bash
# Soak under hostile traffic (issue 17 section 5): a pserver shard, a coordinator, a trainer
# training on a paced stream and `sparrow serve` run on loopback while tests/soak/hostile.py sends
# random and mutated ZeroMQ frames at the shard's and the coordinator's ports and random,
# malformed, oversized and slow HTTP at serve and every /metrics port, and a valid client
# predicts. Pass: no role crashed, no valid request failed or was wrong, the trainer kept pushing,
# resident memory bounded (after <= 2 x before + 64 MiB for each role), and the hostile input
# counted by the roles (pserver error replies or dropped frames, serve's bad requests, the HTTP
# layer's rejected requests and closed connections).
# usage: soak.sh SPARROW DIR [SECS [RATE]]   (defaults 20 s, 150 actions/s: the CI run)
set -euo pipefail
SPARROW=$1
DIR=$2
SECS=${3:-20}
RATE=${4:-150}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$DIR" && mkdir -p "$DIR"
cd "$DIR"
source "$HERE/../integration/cluster_lib.sh"

start_mock 1 examples:2 model-updates:1
p0=$(free_port)
cp=$(free_port)
start_shard 0 1 "$p0" 5
SHARD=$SHARD_PID
"$SPARROW" coordinator --listen "tcp://127.0.0.1:$cp" --mode async --shards "tcp://127.0.0.1:$p0" \
    --http-port 0 --set coordinator.startup.grace=500ms >"$DIR/coord.log" 2>&1 &
COORD=$!
PIDS+=("$COORD")
start_coord_trainer "tcp://127.0.0.1:$p0" "$cp"
start_gen 0 2000
"$SPARROW" serve --brokers "$BS" --topic model-updates --port 0 --port-file serve.port \
    --set serve.log.dir="$DIR" >"$DIR/serve.log" 2>&1 &
SERVE=$!
PIDS+=("$SERVE")
wait_file serve.port 30 || fail "serve did not start"
SPORT=$(cat serve.port)
wait_for "serve ready" 60 curl -sf -o /dev/null "http://127.0.0.1:$SPORT/readyz"
http_port() { grep -o 'http endpoint port=[0-9]*' "$1" | head -1 | cut -d= -f2; }
wait_for "the shard's http port" 20 grep -q 'http endpoint port=' "$DIR/shard-0.log"
wait_for "the coordinator's http port" 20 grep -q 'http endpoint port=' "$DIR/coord.log"
PSH=$(http_port "$DIR/shard-0.log")
CSH=$(http_port "$DIR/coord.log")
metric() { # PORT NAME-PREFIX: the sum of the series whose name starts with NAME-PREFIX
    curl -sf "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($1, m) == 1 {s += $2} END {printf "%d", s}'
}
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
wait_for "the trainer's first pushes" 60 \
    bash -c "[ \$(curl -sf http://127.0.0.1:$PSH/metrics | awk '/^sparrow_ps_rows_total\{op=\"push\"\}/ {print int(\$2)}') -gt 0 ]"

pushed0=$(metric "$PSH" 'sparrow_ps_rows_total{op="push"}')
declare -A RSS0
for role in SHARD COORD SERVE TR; do RSS0[$role]=$(rss "${!role}"); done
echo "soak: ${SECS}s at ${RATE}/s; zmq shard:$p0 coordinator:$cp; http serve:$SPORT shard:$PSH coordinator:$CSH"
python3 "$HERE/hostile.py" --secs "$SECS" --rate "$RATE" --zmq "127.0.0.1:$p0" --zmq "127.0.0.1:$cp" \
    --http "$SPORT" --http "$PSH" --http "$CSH" --predict "$SPORT" >"$DIR/hostile.out" \
    2>"$DIR/hostile.log" || { cat "$DIR/hostile.out"; fail "hostile.py: a valid request failed or was wrong"; }
echo "soak: hostile counts $(cat "$DIR/hostile.out")"

for role in SHARD COORD SERVE TR; do
    kill -0 "${!role}" 2>/dev/null || fail "$role crashed"
done
wait_for "the trainer to keep pushing" 30 \
    bash -c "[ \$(curl -sf http://127.0.0.1:$PSH/metrics | awk '/^sparrow_ps_rows_total\{op=\"push\"\}/ {print int(\$2)}') -gt $pushed0 ]"
for role in SHARD COORD SERVE TR; do
    before=${RSS0[$role]}
    after=$(rss "${!role}")
    echo "soak: $role resident ${before} kB before, ${after} kB after"
    if [ -n "${SPARROW_SANITIZE:-}" ]; then
        continue # a sanitizer's quarantine and shadow memory, not the role's (plain builds check)
    fi
    [ "$after" -le $((before * 2 + 65536)) ] || fail "$role resident memory grew from $before to $after kB"
done
ps_bad=$(($(metric "$PSH" sparrow_ps_error_replies_total) + $(metric "$PSH" sparrow_ps_dropped_frames_total)))
serve_bad=$(metric "$SPORT" sparrow_serve_bad_requests_total)
rejected=0 closed=0
for port in "$SPORT" "$PSH" "$CSH"; do
    rejected=$((rejected + $(metric "$port" sparrow_http_rejected_requests_total)))
    closed=$((closed + $(metric "$port" sparrow_http_connections_timed_out_total) + $(metric "$port" sparrow_http_connections_evicted_total)))
done
coord_bad=$(metric "$CSH" sparrow_coord_malformed_messages_total)
echo "soak: counted pserver_errors=$ps_bad serve_bad_requests=$serve_bad http_rejected=$rejected http_closed_slow=$closed coordinator_malformed=$coord_bad"
[ "$ps_bad" -gt 0 ] || fail "the shard counted none of the hostile frames"
[ "$serve_bad" -gt 0 ] || fail "serve counted no bad request"
[ "$rejected" -gt 0 ] || fail "the HTTP layer counted no rejected request"
[ "$coord_bad" -gt 0 ] || fail "the coordinator counted none of the hostile frames"
echo "soak: passed"
