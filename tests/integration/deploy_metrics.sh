#!/usr/bin/env bash
# Every role's /metrics passes `promtool check metrics`, and every role exits 0 on SIGTERM: a Kafka
# mock, a shard, a trainer (streaming from `sparrow gen`), `sparrow ingest` and `sparrow serve` run
# together on loopback; each one's exposition is scraped while it works and checked.
# usage: deploy_metrics.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
command -v promtool >/dev/null || { echo "promtool missing (scripts/install-deps.sh installs it)"; exit 1; }

# http_port LOG: the port an HTTP endpoint reported in LOG ("http endpoint port=N" or "... up port=N").
http_port() {
    grep -o "http endpoint[a-z ]* port=[0-9]*" "$1" | head -1 | grep -o '[0-9]*$'
}
has_port() { [ -n "$(http_port "$1")" ]; }

# check_metrics NAME PORT: scrape /metrics and validate it with promtool.
check_metrics() {
    curl -sf "http://127.0.0.1:$2/metrics" >"$DIR/$1.metrics" || fail "$1: /metrics unreachable"
    [ -s "$DIR/$1.metrics" ] || fail "$1: empty /metrics"
    promtool check metrics <"$DIR/$1.metrics" >"$DIR/$1.promtool" 2>&1 ||
        { cat "$DIR/$1.promtool"; fail "$1: promtool check metrics failed"; }
    echo "$1: $(grep -c '^# TYPE' "$DIR/$1.metrics") metric families pass promtool"
}

# stop NAME PID: SIGTERM, then the process must exit 0 within 30 s.
stop() {
    kill -TERM "$2"
    local rc=0
    timeout 30 tail --pid="$2" -f /dev/null || fail "$1 did not exit within 30 s of SIGTERM"
    wait "$2" || rc=$?
    [ "$rc" -eq 0 ] || fail "$1 exited $rc after SIGTERM"
    echo "$1: exit 0 after SIGTERM"
}

"$SPARROW" kafka-mock --topic events:2 --topic examples:2 --topic model-updates:2 \
    --port-file "$DIR/bootstrap" >"$DIR/mock.log" 2>&1 &
MOCK=$!
PIDS+=("$MOCK")
wait_for "the mock's bootstrap address" 20 test -s "$DIR/bootstrap"
BS=$(cat "$DIR/bootstrap")

P0=$(free_port)
start_shard 0 1 "$P0" 5
SHARD=$SHARD_PID
wait_for "the shard's http port" 20 has_port "$DIR/shard-0.log"

set +o pipefail
"$SPARROW" gen --n 0 --seed 3 --out - 2>"$DIR/gen.log" |
    "$SPARROW" trainer --in file:- --shards "tcp://127.0.0.1:$P0" --model fm --latent-dim 4 \
        --backend cpu --http-port 0 --set trainer.http.addr=127.0.0.1 >"$DIR/trainer.log" 2>&1 &
TRAINER=$!
set -o pipefail
PIDS+=("$TRAINER")
wait_for "the trainer's http port" 20 has_port "$DIR/trainer.log"

"$SPARROW" gen --n 2000 --seed 4 --format json --out "$DIR/events.json" 2>"$DIR/gen-json.log"
"$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
    --group metrics-test --set ingest.http.port=0 >"$DIR/ingest.log" 2>&1 &
INGEST=$!
PIDS+=("$INGEST")
wait_for "ingest's http port" 30 has_port "$DIR/ingest.log"
kcat -P -b "$BS" -t events -l "$DIR/events.json" 2>"$DIR/kcat.log" || fail "kcat produce"

mkdir -p "$DIR/checkpoints"
"$SPARROW" serve --checkpoint-dir "$DIR/checkpoints" --allow-empty --brokers "$BS" --port 0 \
    --port-file "$DIR/serve.port" --set "serve.log.dir=$DIR" >"$DIR/serve.log" 2>&1 &
SERVE=$!
PIDS+=("$SERVE")
wait_for "serve's port file" 30 test -s "$DIR/serve.port"

CP=$(free_port)
"$SPARROW" coordinator --listen "tcp://127.0.0.1:$CP" --shards "tcp://127.0.0.1:$P0" \
    --checkpoint-dir "$DIR/checkpoints" --http-port 0 --set coordinator.http.addr=127.0.0.1 \
    --set coordinator.startup.grace=200ms >"$DIR/coordinator.log" 2>&1 &
COORD=$!
PIDS+=("$COORD")
wait_for "the coordinator's http port" 20 has_port "$DIR/coordinator.log"

sleep 3 # let every role do some work, so its counters and histograms carry values
check_metrics pserver "$(http_port "$DIR/shard-0.log")"
check_metrics trainer "$(http_port "$DIR/trainer.log")"
check_metrics ingest "$(http_port "$DIR/ingest.log")"
check_metrics serve "$(cat "$DIR/serve.port")"
check_metrics coordinator "$(http_port "$DIR/coordinator.log")"

stop trainer "$TRAINER"
stop ingest "$INGEST"
stop serve "$SERVE"
stop coordinator "$COORD"
stop pserver "$SHARD"
stop kafka-mock "$MOCK"
echo "deploy_metrics: every role's /metrics passes promtool; every role exits 0 on SIGTERM"
