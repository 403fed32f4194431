#!/usr/bin/env bash
# Every role on loopback at once, as in production: a Kafka mock, a shard publishing model updates,
# the coordinator (checkpoints every second), a Kafka trainer under it, `sparrow ingest` and
# `sparrow serve`, each with log.format=json. Checked while they work: every role's /metrics passes
# `promtool check metrics` and carries the process collector (process_*, sparrow_build_info of this
# binary's version); every metric the alert rules and the Grafana dashboard of deploy/monitoring
# name exists on some role's /metrics (monitoring_check.py scraped); every line each role logged
# is one JSON object with ts, level, role and msg. Then every role exits 0 on SIGTERM.
# usage: deploy_metrics.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v promtool >/dev/null || { echo "promtool missing (scripts/install-deps.sh installs it)"; exit 1; }
JSON=(--set log.format=json)

# http_port LOG: the port of the role's HTTP endpoint, from its JSON log line "http endpoint".
http_port() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("msg", "").startswith("http endpoint") and "port" in r:
        print(r["port"])
        break
PY
}
has_port() { [ -n "$(http_port "$1")" ]; }

VERSION=$("$SPARROW" --version | awk '{print $2}')
# check_metrics NAME PORT: scrape /metrics, validate it with promtool, and find the process
# collector's families and this binary's build.
check_metrics() {
    curl -sf "http://127.0.0.1:$2/metrics" >"$DIR/$1.metrics" || fail "$1: /metrics unreachable"
    [ -s "$DIR/$1.metrics" ] || fail "$1: empty /metrics"
    promtool check metrics <"$DIR/$1.metrics" >"$DIR/$1.promtool" 2>&1 ||
        { cat "$DIR/$1.promtool"; fail "$1: promtool check metrics failed"; }
    local m
    for m in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes \
        process_open_fds process_max_fds process_start_time_seconds; do
        grep -q "^$m [0-9]" "$DIR/$1.metrics" || fail "$1: no $m sample"
    done
    grep -q "^sparrow_build_info{version=\"$VERSION\",commit=\"[^\"]*\",build_type=\"[^\"]*\",compiler=\"[^\"]*\"} 1$" \
        "$DIR/$1.metrics" || fail "$1: no sparrow_build_info of version $VERSION"
    echo "$1: $(grep -c '^# TYPE' "$DIR/$1.metrics") metric families pass promtool, process_* and build info present"
}

# check_json_log NAME LOG: every line is one JSON object with ts, level, role = NAME and msg.
check_json_log() {
    python3 - "$1" "$2" <<'PY' || fail "$1: log lines that are not JSON objects"
import json, re, sys
role, path = sys.argv[1], sys.argv[2]
n = 0
for i, line in enumerate(open(path, encoding="utf-8"), 1):
    try:
        r = json.loads(line)
    except ValueError as e:
        sys.exit("%s:%d: not JSON (%s): %r" % (path, i, e, line[:200]))
    if not (isinstance(r, dict) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r.get("ts", ""))
            and r.get("level") in ("error", "warn", "info", "debug") and r.get("role") == role
            and isinstance(r.get("msg"), str)):
        sys.exit("%s:%d: not a log record of %s: %r" % (path, i, role, line[:200]))
    n += 1
if n < 3:
    sys.exit("%s: only %d lines" % (path, n))
print("%s: %d log lines, each a JSON object" % (role, n))
PY
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

start_broker events:2 examples:2 model-updates:2
CK="$DIR/ck"
P0=$(free_port)
SHARDS="tcp://127.0.0.1:$P0"
start_shard 0 1 "$P0" 5 --set pserver.checkpoint.dir="$CK" --set pserver.publish.brokers="$BS" \
    --set pserver.publish.interval=200ms "${JSON[@]}"
SHARD=$SHARD_PID
wait_for "the shard's http port" 20 has_port "$DIR/shard-0.log"

start_coordinator async "$CK" --http-port 0 --set coordinator.http.addr=127.0.0.1 \
    --set coordinator.checkpoint.interval=1s "${JSON[@]}"
wait_for "the coordinator's http port" 20 has_port "$DIR/coord.log"

start_coord_trainer "$SHARDS" "$COORD_PORT" --http-port 0 --set trainer.http.addr=127.0.0.1 \
    "${JSON[@]}"
TRAINER=$TR
wait_for "the trainer's http port" 20 has_port "$DIR/trainer.log"

"$SPARROW" gen --n 3000 --seed 4 --format json --out "$DIR/events.json" 2>"$DIR/gen-json.log"
"$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
    --group metrics-test --set ingest.http.port=0 "${JSON[@]}" >"$DIR/ingest.log" 2>&1 &
INGEST=$!
PIDS+=("$INGEST")
wait_for "ingest's http port" 30 has_port "$DIR/ingest.log"
kcat -P -b "$BS" -t events -l "$DIR/events.json" 2>"$DIR/kcat.log" || fail "kcat produce"

# serve starts from a checkpoint that holds the trained rows
wait_for "a checkpoint with examples" 60 bash -c \
    "grep 'checkpoint completed' '$DIR/coord.log' | grep -qv '\"examples\":0[,}]'"
start_serve "$CK" "${JSON[@]}"
SERVE_PID=$SERVE
wait_for "serve ready" 30 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$SPORT/readyz)\" = 200 ]"
curl -sf -X POST "http://127.0.0.1:$SPORT/v1/predict" -d '{"features":{"user":"u1"}}' >/dev/null ||
    fail "predict"

sleep 2 # let every role do some more work, so its counters and histograms carry values
check_metrics pserver "$(http_port "$DIR/shard-0.log")"
check_metrics trainer "$(http_port "$DIR/trainer.log")"
check_metrics ingest "$(http_port "$DIR/ingest.log")"
check_metrics serve "$SPORT"
check_metrics coordinator "$(http_port "$DIR/coord.log")"
python3 "$HERE/monitoring_check.py" scraped "$DIR"/*.metrics ||
    fail "metrics named by deploy/monitoring are missing (above)"

stop trainer "$TRAINER"
stop ingest "$INGEST"
stop serve "$SERVE_PID"
stop coordinator "$COORD"
stop pserver "$SHARD"
stop kafka-mock "$MOCK"
check_json_log pserver "$DIR/shard-0.log"
check_json_log coordinator "$DIR/coord.log"
check_json_log trainer "$DIR/trainer.log"
check_json_log ingest "$DIR/ingest.log"
check_json_log serve "$DIR/serve.log"
echo "deploy_metrics: every role's /metrics passes promtool and has what deploy/monitoring names;" \
    "every role logs JSON lines and exits 0 on SIGTERM"
