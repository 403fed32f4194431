#!/usr/bin/env bash
# SIGTERM under load, role by role: each must exit 0 within its Kubernetes grace period
# (deploy/k8s terminationGracePeriodSeconds, read from the manifests) having flushed what it owes.
#   pserver      pushes arriving from a client, publishing every 3 s: the final publish puts every
#                row's last value on the update stream (each key's last record there equals the
#                shard's row after a restart, bit for bit, version included).
#   serve        requests in flight from 8 concurrent clients: every request that reached it gets
#                its answer.
#   coordinator  with a Kafka trainer and checkpoint epochs running: LATEST, its MANIFEST and
#                every shard checkpoint still verify (`sparrow reshard` as the verifier).
#   trainer      (Kafka input, its coordinator gone): every push acknowledged and applied by the
#                shard, exit 0. trainer_sigterm.sh covers the file-input trainer with top-k.
#   ingest       is in sigterm_ingest.sh.
# usage: sigterm_roles.sh SPARROW SCRATCH_DIR PSERVER_CLIENT
SPARROW=$1
DIR=$2
CLIENT=$3
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
K8S="$(dirname "${BASH_SOURCE[0]}")/../../deploy/k8s/base"

# grace ROLE: terminationGracePeriodSeconds of ROLE's workload in deploy/k8s/base.
grace() {
    local g
    g=$(grep -o 'terminationGracePeriodSeconds: [0-9]*' "$K8S/$1.yaml" | grep -o '[0-9]*$')
    [ -n "$g" ] || fail "no terminationGracePeriodSeconds in $K8S/$1.yaml"
    echo "$g"
}
# term NAME PID GRACE: SIGTERM, then PID must exit 0 within GRACE seconds. Sets ELAPSED.
term() {
    local name=$1 pid=$2 g=$3 rc=0 t0
    t0=$(date +%s.%N)
    kill -TERM "$pid"
    timeout "$g" tail -s 0.1 --pid="$pid" -f /dev/null || fail "$name still running $g s after SIGTERM"
    wait "$pid" || rc=$?
    ELAPSED=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
    [ "$rc" -eq 0 ] || fail "$name exited $rc after SIGTERM"
    echo "$name: exit 0 ${ELAPSED} s after SIGTERM (grace $g s)"
}

start_broker examples:2 model-updates:4

# ---- pserver: the final publish ----
DIM=8
NKEYS=5000
PP=$(free_port)
PS_ARGS=(--listen "tcp://127.0.0.1:$PP" --shard 0 --shards 1 --dim $DIM --data-dir "$DIR/ps"
    --http-port 0 --memory-mb 64 --set pserver.restore=false)
"$SPARROW" pserver "${PS_ARGS[@]}" --set pserver.publish.brokers="$BS" \
    --set pserver.publish.interval=3s >"$DIR/ps.log" 2>&1 &
PS=$!
PIDS+=("$PS")
wait_for "the shard" 20 "$CLIENT" "tcp://127.0.0.1:$PP" $DIM health
# load: rounds of pull + push over NKEYS keys until the shard goes away
(
    s=1
    while [ ! -e "$DIR/stop-load" ] &&
        "$CLIENT" "tcp://127.0.0.1:$PP" $DIM train $s 5 $NKEYS 1 >/dev/null 2>&1; do
        s=$((s + 1))
    done
) &
LOAD=$!
PIDS+=("$LOAD")
published() { [ "$(timeout 10 kcat -C -b "$BS" -t model-updates -e -q -f 'x\n' | wc -l)" -gt 0 ]; }
wait_for "a periodic publish" 30 published
sleep 1.5 # half an interval of pushes that only the final publish can carry
term pserver "$PS" "$(grace pserver)"
touch "$DIR/stop-load"
wait "$LOAD" || true
grep -q "update publisher stopped" "$DIR/ps.log" || fail "pserver: no final publish logged"
grep -q "model updates not published" "$DIR/ps.log" && fail "pserver: updates lost at shutdown"
# the shard's rows as it left them (its live database, reopened) against the stream
"$SPARROW" pserver "${PS_ARGS[@]}" --set pserver.publish.interval=0 >"$DIR/ps-after.log" 2>&1 &
PS=$!
PIDS+=("$PS")
wait_for "the restarted shard" 20 "$CLIENT" "tcp://127.0.0.1:$PP" $DIM health
"$CLIENT" "tcp://127.0.0.1:$PP" $DIM dump $NKEYS "$DIR/rows.bin" || fail "dump"
term "pserver (restarted)" "$PS" 60 >/dev/null
timeout 60 kcat -C -b "$BS" -t model-updates -e -q -f '%R%s' >"$DIR/updates.raw" ||
    fail "reading the update stream"
PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$DIR/rows.bin" "$DIR/updates.raw" $NKEYS $DIM <<'PY' ||
    fail "pserver: final values not published"
import struct, sys
rows_path, raw_path, nkeys, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# pserver_client dump: per batch of 256 keys, the values (n x dim f32) then the versions (n u32)
data = open(rows_path, "rb").read()
rows, pos = {}, 0
for base in range(0, nkeys, 256):
    n = min(256, nkeys - base)
    vals = data[pos:pos + n * dim * 4]; pos += n * dim * 4
    vers = struct.unpack("<%dI" % n, data[pos:pos + n * 4]); pos += n * 4
    for i in range(n):
        if vers[i]:
            rows[base + i] = (vers[i], vals[i * dim * 4:(i + 1) * dim * 4])
from pbwire import model_update_rows
raw, last, i, records = open(raw_path, "rb").read(), {}, 0, 0
while i < len(raw):
    (n,) = struct.unpack(">I", raw[i:i + 4]); i += 4
    msg = raw[i:i + n]; i += n
    records += 1
    for r in model_update_rows(msg):  # a key's records are in one partition, in order
        last[r["key"]] = (r["version"], None if r["tombstone"] else r["weights"], r["tombstone"])
bad = [k for k, (ver, vals) in rows.items() if last.get(k, (None, None))[:2] != (ver, vals)]
print("pserver: %d rows, %d update records; every row's last record equals it: %s"
      % (len(rows), records, "yes" if not bad else "NO (%d differ, e.g. key %d: shard %s, stream %s)"
         % (len(bad), bad[0], rows[bad[0]][0], last.get(bad[0], (None,))[0])))
sys.exit(1 if bad or not rows else 0)
PY

# ---- coordinator, serve, trainer: a Kafka trainer under the coordinator ----
CK="$DIR/ck"
start_shards 1 5 --set pserver.checkpoint.dir="$CK" --set pserver.restore=false \
    --set pserver.publish.brokers="$BS" --set pserver.publish.interval=500ms
wait_for "the shard's http port" 20 grep -q "http endpoint port=" "$DIR/shard-0.log"
SHARD_HTTP=$(grep -o "http endpoint port=[0-9]*" "$DIR/shard-0.log" | head -1 | cut -d= -f2)
start_coordinator hybrid:10 "$CK" --set coordinator.checkpoint.steps=20
start_coord_trainer "$SHARDS" "$COORD_PORT"
start_gen 0 3000
wait_for "checkpoint epoch 2" 90 grep -q "checkpoint completed epoch=2 " "$DIR/coord.log"

# serve: bootstrapped from the checkpoints, tailing the stream, 8 clients in a loop
start_serve "$CK"
wait_for "serve ready" 60 curl -sf "http://127.0.0.1:$SPORT/readyz" -o /dev/null
python3 - "$SPORT" "$DIR/serve-load.txt" <<'PY' &
import http.client, json, sys, threading, time
port, out = int(sys.argv[1]), sys.argv[2]
body = json.dumps({"examples": [{"features": {"user": "u%d" % i, "hour": i % 24}}
                                for i in range(64)]})
stats = {"ok": 0, "refused": 0, "broken": 0, "bad": 0}
lock = threading.Lock()
def client():
    refused_since = None
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.connect()
        except (ConnectionRefusedError, ConnectionResetError):  # never accepted: not in flight
            with lock: stats["refused"] += 1
            refused_since = refused_since or time.time()
            if time.time() - refused_since > 2:
                return
            time.sleep(0.05)
            continue
        refused_since = None
        try:
            c.request("POST", "/v1/predict", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            with lock: stats["ok" if r.status == 200 else "bad"] += 1
        except ConnectionResetError:
            # connected to the kernel's backlog after serve stopped accepting: reset when the
            # listening socket closes, never accepted by serve (not a request in flight)
            with lock: stats["reset"] = stats.get("reset", 0) + 1
        except (http.client.RemoteDisconnected, BrokenPipeError, http.client.IncompleteRead,
                TimeoutError) as e:
            with lock:
                stats["broken"] += 1
                kind = type(e).__name__
                stats[kind] = stats.get(kind, 0) + 1
        finally:
            c.close()
threads = [threading.Thread(target=client) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
open(out, "w").write(" ".join("%s=%d" % kv for kv in stats.items()) + "\n")
PY
LOADER=$!
PIDS+=("$LOADER")
wait_for "serve answering the load" 30 bash -c \
    "curl -sf http://127.0.0.1:$SPORT/metrics | awk '\$1 == \"sparrow_serve_requests_total\" && \$2 > 200 {f=1} END {exit !f}'"
term serve "$SERVE" "$(grace serve)"
wait "$LOADER" || fail "the serve load generator"
echo "serve: requests $(cat "$DIR/serve-load.txt")"
# spw_http_stop stops accepting, waits for the requests begun, then closes: none is cut off
grep -q " broken=0" "$DIR/serve-load.txt" || fail "serve: requests in flight cut off"
grep -q " bad=0" "$DIR/serve-load.txt" || fail "serve: requests refused"

# coordinator: epochs keep coming while the trainer trains
before=$(grep -c "checkpoint completed" "$DIR/coord.log")
wait_for "another epoch" 60 bash -c "[ \$(grep -c 'checkpoint completed' '$DIR/coord.log') -gt $before ]"
term coordinator "$COORD" "$(grace coordinator)"
E=$(cat "$CK/checkpoints/LATEST")
"$SPARROW" reshard --from "$CK" --shards 1 --to "$DIR/verify" >"$DIR/verify.out" 2>&1 ||
    { cat "$DIR/verify.out"; fail "coordinator: LATEST ($E) does not verify"; }
echo "coordinator: LATEST=$E, its MANIFEST and shard checkpoint verify"

# trainer: its coordinator gone, still training on
term trainer "$TR" "$(grace trainer)"
kill -TERM "$GEN" 2>/dev/null || true
wait "$GEN" 2>/dev/null || true
[ "$(kv status "$DIR/trainer.log")" = success ] || fail "trainer: status $(kv status "$DIR/trainer.log")"
grep -q "final offset commit failed\|not acknowledged within the grace" "$DIR/trainer.log" &&
    fail "trainer: pushes or offsets not flushed"
pushed=$(kv rows_pushed "$DIR/trainer.log")
applied() {
    curl -sf "http://127.0.0.1:$SHARD_HTTP/metrics" >"$DIR/shard-metrics.txt" || return 1
    APPLIED=$(awk '$1 == "sparrow_ps_rows_total{op=\"push\"}" {print $2}' "$DIR/shard-metrics.txt")
    [ "${APPLIED:-0}" = "$pushed" ]
}
APPLIED=0
wait_for "the shard to count $pushed pushed rows (has ${APPLIED:-0})" 10 applied
echo "trainer: rows pushed $pushed, applied by the shard $APPLIED"
term pserver "${SHARD_PIDS[0]}" "$(grace pserver)"
echo "sigterm_roles: ok"
