#!/usr/bin/env bash
# ingest_bench: in one run, over the same topic of the same mock cluster, the raw consume rate of
# a bare librdkafka consumer (bench/ingest_bench_consume.c) and `sparrow ingest`'s end-to-end rate (events in, validated
# ExampleBatch records out), for JSON events of 39 features and for protobuf events.
# usage: bench/ingest_bench.sh BUILD_DIR [N_EVENTS [ROUNDS]]   (default 40000 per format, 3 rounds)
# Each rate is measured ROUNDS times (every round reads the topic from its start again, ingest in a
# group of its own) and the median is reported: one round of 40,000 events lasts about 0.1 s. Both
# time themselves from their first record to the N-th: the bare consumer in its loop, ingest in its
# stop line (events_seconds), so no outside poll adds its period or its CPU to the window.
# Targets (issue 4): ingest >= 0.5 x bare consume for JSON; >= 300,000 events/s for protobuf.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPARROW=$BUILD/sparrow
N=${2:-40000}
ROUNDS=${3:-3}
PARTS=16
WORK=$(mktemp -d /tmp/ingest_bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

"$SPARROW" kafka-mock --topic events_json:$PARTS --topic events_pb:$PARTS --topic out_json:$PARTS \
    --topic out_pb:$PARTS --port-file port --log-level warn </dev/null >/dev/null 2>mock.err &
PIDS+=("$!")
for _ in $(seq 1 100); do [ -s port ] && break; sleep 0.1; done
BS=$(cat port)

# The data: N events per format. The mock keeps ~5 MB per partition, so N stays moderate.
"$SPARROW" gen --n "$N" --format json --out events.json 2>/dev/null
"$SPARROW" gen --n "$N" --format pb --out events.pb 2>/dev/null
timeout 120 kcat -P -b "$BS" -t events_json -X linger.ms=50 -X sticky.partitioning.linger.ms=0 \
    <events.json
# One record per Example: split the length-delimited file into one file per record for kcat.
mkdir pb && python3 - "$REPO/tests/integration" <<'PY'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import pbwire
for n, rec in enumerate(pbwire.records("events.pb")):
    open("pb/%07d" % n, "wb").write(rec)
PY
(cd pb && ls | xargs -n 4000 timeout 120 kcat -P -b "$BS" -t events_pb -X linger.ms=50 \
    -X sticky.partitioning.linger.ms=0)

bare_rate() { # topic: a bare librdkafka consumer, timed from its first record to the N-th
    "$BUILD/bench/ingest_bench_consume" "$BS" "$1" "$N"
}

metric() { # port name
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'
}

ingest_rate() { # format in_topic out_topic round
    "$SPARROW" ingest --in "kafka://$BS/$2" --out "kafka://$BS/$3" --format "$1" \
        --group "bench-$1-$4" --set ingest.http.port=0 --set ingest.batch.size=2000 \
        --set log.level=info 2>"ingest-$1.err" &
    local pid=$!
    PIDS+=("$pid")
    local port=""
    for _ in $(seq 1 100); do
        port=$(sed -n 's/.*http endpoint port=\([0-9]*\).*/\1/p' "ingest-$1.err" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.1
    done
    local finished="" ev=0
    for _ in $(seq 1 1200); do
        ev=$(metric "$port" sparrow_ingest_events_total)
        ev=${ev:-0}
        if [ "${ev%.*}" -ge "$N" ]; then finished=1; break; fi
        sleep 0.1
    done
    kill -TERM "$pid"
    wait "$pid"
    [ -n "$finished" ] || { echo "ingest $1 did not finish: $ev events" >&2; exit 1; }
    # every event in, and out as a validated example delivered (SIGTERM drains before this line)
    local stop s_ev s_ex s_secs
    stop=$(sed -n 's/.*ingest stopped events=\([0-9]*\) examples=\([0-9]*\) .* events_seconds=\([0-9.]*\).*/\1 \2 \3/p' \
        "ingest-$1.err")
    read -r s_ev s_ex s_secs <<<"$stop"
    [ "$s_ev" = "$N" ] && [ "$s_ex" = "$N" ] ||
        { echo "ingest $1 stopped with '$stop' (events examples seconds), want $N events and examples" >&2; exit 1; }
    python3 -c "print('%.0f' % ($N / $s_secs))"
}

BARE_JSON="" BARE_PB="" ING_JSON="" ING_PB=""
for r in $(seq 1 "$ROUNDS"); do
    BARE_JSON+="$(bare_rate events_json),"
    BARE_PB+="$(bare_rate events_pb),"
    ING_JSON+="$(ingest_rate json events_json out_json "$r"),"
    ING_PB+="$(ingest_rate pb events_pb out_pb "$r"),"
done
python3 - "$N" "$PARTS" "$BARE_JSON" "$ING_JSON" "$BARE_PB" "$ING_PB" <<'PY'
import statistics
import sys
n, parts = int(sys.argv[1]), int(sys.argv[2])
rounds = [[float(x) for x in a.split(",") if x] for a in sys.argv[3:]]
bj, ij, bp, ip = (statistics.median(r) for r in rounds)
print(f"ingest_bench: {n} events per format, one mock broker, {parts} partitions, "
      f"median of {len(rounds[0])} rounds")
for name, r in zip(("bare json", "ingest json", "bare pb", "ingest pb"), rounds):
    print(f"  rounds, {name:<11}: " + " ".join(f"{x:,.0f}" for x in r))
print(f"  json (39 features): bare consume {bj:>10,.0f} msg/s   ingest {ij:>10,.0f} events/s   "
      f"ratio {ij / bj:.2f} (target >= 0.50)")
print(f"  protobuf          : bare consume {bp:>10,.0f} msg/s   ingest {ip:>10,.0f} events/s   "
      f"ratio {ip / bp:.2f} (target >= 300,000 events/s)")
PY
