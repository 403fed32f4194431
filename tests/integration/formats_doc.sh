#!/usr/bin/env bash
# docs/FORMATS.md's examples are true (formats_doc.py says which blocks are tested): its JSON events
# through `sparrow ingest` (file to file: the accepted ones become examples, each refused one is
# dead-lettered with the reason its block names, the documented dead-letter line is one of them),
# its Criteo line through ingest, and its curl commands against `sparrow serve` of an FM model
# (k 8, as the document's row shows) trained on those events plus generated ones: ingest to the
# Kafka mock, a trainer, a shard publishing model-updates, serve tailing them. Each answer has the
# documented status and shape (errors: the exact body).
# usage: formats_doc.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DOC="$HERE/../../docs/FORMATS.md"
X="$DIR/blocks"
python3 "$HERE/formats_doc.py" extract "$DOC" "$X" || fail "extracting the tested blocks"
cd "$DIR"

# 1. The JSON events, file to file, in one run: accepted ones and dead letters, in order.
# (Most of these events are refused on purpose: the exit status is not checked, the counts are.)
cp "$X/events.json" events.json
"$SPARROW" ingest --in file:events.json --out file:events.pb --format json \
    --set ingest.http.port=-1 2>ingest-doc.log || true
n_ok=$(grep -cx ok "$X/events.expect")
n_all=$(wc -l <"$X/events.expect")
grep -q "ingest stopped events=$n_all examples=$n_ok rejected=$((n_all - n_ok)) " ingest-doc.log ||
    fail "want $n_ok of $n_all events accepted: $(grep 'ingest stopped' ingest-doc.log)"
python3 - "$X/events.expect" events.pb.dlq events.json <<'PY' || fail "dead letters differ from the document"
import sys
expect = [l.strip() for l in open(sys.argv[1])]
dlq = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
events = [l.rstrip("\n") for l in open(sys.argv[3])]
want = [(r, events[i], str(i)) for i, r in enumerate(expect) if r != "ok"]
got = [(d[0], d[4], d[3]) for d in dlq]
if got != want:
    for w, g in zip(want, got + [None] * len(want)):
        if w != g:
            sys.exit("event %s: documented %s, dead-lettered %s" % (w[2], w, g))
    sys.exit("extra dead letters: %s" % got[len(want):])
print("formats_doc: %d documented rejections dead-lettered with their reasons" % len(want))
PY
grep -qxF -f "$X/dead-letter.tsv" events.pb.dlq || fail "the documented dead-letter line is not in the output: $(cat "$X/dead-letter.tsv")"
for f in "$X"/rejected-*.json; do
    base=${f%.json}
    sets=()
    while read -r kv; do sets+=(--set "$kv"); done <"$base.set"
    cp "$f" rejected.json
    rm -f rejected.pb.dlq
    "$SPARROW" ingest --in file:rejected.json --out file:rejected.pb --format json \
        --set ingest.http.port=-1 "${sets[@]}" 2>ingest-rej.log || true
    n=$(wc -l <rejected.json)
    [ "$(cut -f1 rejected.pb.dlq | sort -u)" = "$(cat "$base.reason")" ] && [ "$(wc -l <rejected.pb.dlq)" = "$n" ] ||
        fail "$(basename "$f") with ${sets[*]}: want $n dead letters $(cat "$base.reason"), got $(cut -f1 rejected.pb.dlq | tr '\n' ' ')"
done

# 2. The Criteo line.
bash "$X/criteo.sh" || fail "the Criteo example's command"
"$SPARROW" ingest --in file:day_0.tsv --out file:day_0.pb --format criteo --set ingest.http.port=-1 \
    2>ingest-criteo.log || fail "ingest of the Criteo example"
grep -q "ingest stopped events=1 examples=1 rejected=0 " ingest-criteo.log ||
    fail "the Criteo example: $(grep 'ingest stopped' ingest-criteo.log)"
echo "formats_doc: the Criteo example is one valid example"

# 3. A model trained on the documented events (and 3000 generated ones, so that batches fill),
# published to model-updates and served.
start_broker examples:2 model-updates:2
P0=$(free_port)
start_shard 0 1 "$P0" 9 --set pserver.publish.brokers="$BS" --set pserver.publish.interval=200ms
"$SPARROW" gen --n 3000 --seed 5 --format json --out gen.json 2>gen.log || fail "gen"
# the accepted documented events, then the generated ones
paste -d'\t' "$X/events.expect" events.json | sed -n 's/^ok\t//p' >train.json
[ "$(wc -l <train.json)" = "$n_ok" ] || fail "selecting the accepted events"
cat gen.json >>train.json
"$SPARROW" ingest --in file:train.json --out "kafka://$BS/examples" --format json \
    --set ingest.http.port=-1 >ingest-kafka.log 2>&1 || fail "ingest to Kafka"
grep -q "ingest stopped events=$((n_ok + 3000)) examples=$((n_ok + 3000)) rejected=0 " ingest-kafka.log ||
    fail "ingest to Kafka: $(grep 'ingest stopped' ingest-kafka.log)"
"$SPARROW" trainer --in "kafka://$BS/examples" --shards "tcp://127.0.0.1:$P0" --model fm \
    --latent-dim 8 --batch 256 --backend cpu --group formats --http-port -1 >trainer.log 2>&1 &
PIDS+=("$!")
"$SPARROW" serve --brokers "$BS" --port 0 --port-file serve.port --set serve.log.dir="$DIR" \
    >serve.log 2>&1 &
PIDS+=("$!")
wait_for "serve's port file" 30 test -s serve.port
SPORT=$(cat serve.port)
rows() { curl -s "http://127.0.0.1:$SPORT/metrics" | awk '$1 == "sparrow_serve_rows" {print int($2)}'; }
# the bias row and the rows of the documented features (the first events) are published
wait_for "the trained rows in serve" 60 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' \
    http://127.0.0.1:$SPORT/v1/rows/0)\" = 200 ] && [ \"\$(curl -s http://127.0.0.1:$SPORT/metrics |
    awk '\$1 == \"sparrow_serve_rows\" {print int(\$2)}')\" -gt 1000 ]"
echo "formats_doc: serve holds $(rows) rows"

# 4. ModelUpdate records as documented: batch records (pserver.publish.batch_rows, default 1024)
# without a Kafka key, each row's key in the keys block and its dim 9 float32 weights in
# weights, and only the documented fields (kcat: key length as text, the key, payload length, payload).
kcat -C -b "$BS" -t model-updates -o beginning -c 50 -e -f '%K:%k%R%s' >updates.bin 2>kcat.log ||
    fail "reading model-updates"
PYTHONPATH="$HERE" python3 - updates.bin <<'PY' || fail "model-updates records differ from the document"
import struct, sys
from pbwire import fields, model_update_rows
data = open(sys.argv[1], "rb").read()
i = n = rows = 0
while i < len(data):
    colon = data.index(b":", i)
    klen = int(data[i:colon])
    i = colon + 1 + max(klen, 0)
    (size,) = struct.unpack(">i", data[i:i + 4])
    msg = data[i + 4:i + 4 + size]
    i += 4 + size
    nums = {tag >> 3 for tag, _ in fields(msg)}
    assert klen == -1, "a batch record with a Kafka key"
    assert nums <= {2, 5, 6, 9, 10, 11, 12, 13}, "undocumented fields %s" % sorted(nums)
    assert {2, 9, 10, 11, 12, 13} <= nums, "a batch block missing: %s" % sorted(nums)
    for r in model_update_rows(msg):
        assert len(r["weights"]) == 9 * 4, "weights of %d bytes, want dim 9 x 4" % len(r["weights"])
        assert not r["tombstone"], "a row update marked as a tombstone"
        assert r["shard"] == 0 and r["applied_ms"] > 0, "shard / applied_ms"
        rows += 1
    n += 1
assert n >= 1 and rows > 1000, (n, rows)
print("formats_doc: %d ModelUpdate batch records of %d rows have the documented layout" % (n, rows))
PY

# 5. The curl commands: status and answer as documented.
for f in "$X"/curl-*.sh; do
    base=${f%.sh}
    cmd=$(sed "s|localhost:8080|127.0.0.1:$SPORT|g" "$f")
    status=$(bash -c "$cmd -o answer.json -w '%{http_code}'") || fail "running: $cmd"
    want=$(cat "$base.status")
    [ "$status" = "$want" ] || fail "$(cat "$f"): status $status, documented $want ($(cat answer.json))"
    python3 "$HERE/formats_doc.py" compare "$base.response" answer.json "$want" ||
        fail "$(cat "$f"): the answer differs from the document"
    echo "formats_doc: $status $(cut -c1-90 answer.json)"
done
echo "formats_doc: every tested example of docs/FORMATS.md holds"
