#!/usr/bin/env bash
# Serving after a global restore: two shards publishing to model-updates, one Kafka trainer under
# the coordinator (checkpoint every 40 steps), `sparrow serve` tailing the stream from the start.
# After checkpoint epoch 2 the trainer and shard 1 are killed -9 and the shard restarted: the
# coordinator runs a recovery and both shards restore epoch E, dropping what was trained (and
# published) after E, which nothing trains again. The shards
# then re-publish every key they published since E (restored row, or a tombstone when the
# restored store lacks it). Once training stops and everything settles, serve's row of every key
# ever published equals the shards' own (1e-6), and keys the shards no longer hold are absent.
# usage: serve_restore.sh SPARROW DIR SERVE_DRIVER
SPARROW=$1
DIR=$2
DRIVER=$3
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

start_broker examples:2 model-updates:2
CK="$DIR/ck"
PUB=(--set pserver.checkpoint.dir="$CK" --set pserver.publish.brokers="$BS"
    --set pserver.publish.interval=300ms)
start_shards 2 5 "${PUB[@]}"
start_coordinator hybrid:10 "$CK" --set coordinator.checkpoint.steps=40 \
    --set coordinator.http.port=0
start_serve "$CK" --allow-empty # before the first epoch
start_coord_trainer "$SHARDS" "$COORD_PORT" --set trainer.debug.delay_ms=20 \
    --set trainer.shutdown.grace=3s
# the stream outlasts epoch 2 (40 steps = 10240 examples, 2.5 s at this rate) several times over, so
# the trainer is still training when it is killed: a stream that ended with epoch 2 left nothing
# to drop (CI under ASan: the trainer had consumed all of a 20000-example stream by epoch 2)
start_gen 80000 4000
wait_for "checkpoint epoch 2" 60 grep -q "checkpoint completed epoch=2 " "$DIR/coord.log"
# let the shards train and publish past the checkpoint before the crash: 0.6 s is two publish
# intervals, and shorter than the next epoch can take (40 steps of at least 20 ms each), so the
# crash falls between epoch 2 and 3 with updates published after 2. The trainer goes too, so
# that nothing trains the lost updates again after the recovery
sleep 0.6
recoveries=$(grep -c "recovery completed" "$DIR/coord.log")
kill -9 "$TR" "${SHARD_PIDS[1]}" "$GEN"
wait "$TR" "${SHARD_PIDS[1]}" "$GEN" 2>/dev/null || true
start_shard 1 2 "${SHARD_PORTS[1]}" 5 "${PUB[@]}"
wait_for "the recovery" 60 bash -c \
    "[ \$(grep -c 'recovery completed' '$DIR/coord.log') -gt $recoveries ]"
# the shard's restart is seen either as the reason of a recovery or, when the trainer's timeout
# started one first (both are member.timeout after the kill), during it
grep -q 'shard restarted' "$DIR/coord.log" || fail "the coordinator did not see the restart"
E=$(grep 'recovery completed' "$DIR/coord.log" | tail -1 | grep -o ' epoch=[0-9]*' | cut -d= -f2)
[ "$E" -ge 1 ] || fail "recovered to epoch $E, expected a checkpoint"
grep -q "restored epoch=$E " "$DIR/shard-0.log" || fail "shard 0 did not restore epoch $E"
grep -q "restored epoch=$E " "$DIR/shard-1.log" || fail "shard 1 did not restore epoch $E"
kill -TERM "$COORD" # no further checkpoint or recovery: the shards hold epoch E from now on
wait "$COORD" 2>/dev/null || true
for i in 0 1; do
    wait_for "shard $i's restore scan" 90 grep -q "restore scan done" "$DIR/shard-$i.log"
done
grep -q "restore scan incomplete\|restore scan failed" "$DIR"/shard-*.log &&
    fail "a restore scan did not complete"

# Every key ever published, and the epoch of its records, from the stream itself.
timeout 120 kcat -C -b "$BS" -t model-updates -e -q -f '%K:%k%S:%s' >"$DIR/stream.bin" ||
    fail "kcat could not read model-updates"
PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$DIR" "$E" "$SPORT" "$DRIVER" "$SHARDS" <<'PY' ||
import http.client, json, subprocess, sys, time
d, E, sport, driver, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
data = open(d + "/stream.bin", "rb").read()

from pbwire import model_update_rows

keys, late, i = set(), set(), 0
while i < len(data):
    j = data.index(b":", i); kl = int(data[i:j]); i = j + 1 + max(kl, 0)
    j = data.index(b":", i); vl = int(data[i:j]); v = data[j + 1:j + 1 + max(vl, 0)]; i = j + 1 + max(vl, 0)
    if vl <= 0:
        continue
    for row in model_update_rows(v):
        keys.add(row["key"])
        if row["epoch"] >= E:
            late.add(row["key"])
if len(late) < 10:
    print("FAIL: only %d keys published since epoch %d: the scenario did not happen" % (len(late), E))
    sys.exit(1)

# The shards' rows of every key.
r = subprocess.run([driver, "pull", shards, "5"], input="".join("%d\n" % k for k in sorted(keys)),
                   capture_output=True, text=True, timeout=300)
if r.returncode:
    print("FAIL: pull: " + r.stderr); sys.exit(1)
# A pull cannot tell a stored row of version 0 (created, no update applied) from a key the shard
# does not hold (its initial value, version 0): for those serve may hold that value or nothing.
shard, maybe = {}, {}
for line in r.stdout.split("\n"):
    p = line.split()
    if len(p) == 7:
        (shard if int(p[1]) > 0 else maybe)[int(p[0])] = [float(x) for x in p[2:]]
gone = [k for k in late if k not in shard]
if not gone:
    print("FAIL: no key published since epoch %d was dropped by the restore" % E); sys.exit(1)

conn = http.client.HTTPConnection("127.0.0.1", sport, timeout=30)
def serve_row(k):
    conn.request("GET", "/v1/rows/%d" % k)
    resp = conn.getresponse(); body = resp.read()
    return json.loads(body)["weights"] if resp.status == 200 else None

def mismatches(ks):
    bad = []
    for k in ks:
        w, want = serve_row(k), shard.get(k)
        if want is None and w is not None and k in maybe:
            want = maybe[k]
        if (w is None) != (want is None) or (w is not None and any(abs(a - b) > 1e-6 for a, b in zip(w, want))):
            bad.append((k, w, want))
    return bad

# Converge (the shards no longer change): poll until equal, with a generous deadline.
end = time.time() + 120
bad = mismatches(sorted(keys))
while bad and time.time() < end:
    time.sleep(1)
    bad = mismatches([b[0] for b in bad])
if bad:
    conn.request("GET", "/metrics")
    page = conn.getresponse().read().decode()
    open(d + "/serve.metrics", "w").write(page)
    print("\n".join(l for l in page.split("\n") if l.startswith(("sparrow_serve_updates", "sparrow_kafka_consumer_lag", "sparrow_serve_rows "))))
    print("FAIL: %d of %d keys differ between serve and the shards, e.g. %r" % (len(bad), len(keys), bad[:3]))
    sys.exit(1)
print("serve_restore: %d keys equal to the shards (1e-6); %d published since epoch %d, %d of them "
      "no longer held by the shards and absent from serve" % (len(keys), len(late), E, len(gone)))
PY
    fail "serve differs from the shards after the restore"
echo "serve_restore: ok"
