#!/usr/bin/env bash
# `sparrow ingest` over the mock cluster: valid events plus every kind of invalid one. Output
# examples + dead letters = input events exactly, each dead letter carries the right reason and
# source headers and the raw event unchanged, examples decode to the input's features, records
# keyed by a field keep each value in one partition, and SIGTERM exits 0 after committing.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/ingest_common.sh"

start_mock 1 events:3 examples:4 examples.dlq:1
python3 - <<'PY'
import json
names = [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
open("schema.txt", "w").write("".join(f"{n} = {i + 1}\n" for i, n in enumerate(names)))
PY
"$SPARROW" gen --n 300 --format json --out valid.json 2>gen.err || fail "gen"
python3 - <<'PY'
import json
bad = [
    ("undecodable", '{not json'),
    ("bad_label", '{"id":9001,"label":7,"features":{"C1":"a"}}'),
    ("too_many_features", json.dumps({"id": 9002, "label": 1,
                                      "features": {f"C{i % 26 + 1}": "v" for i in range(1)} |
                                      {f"I{i % 13 + 1}x{i}": "v" for i in range(60)}})),
    ("bad_field", '{"id":9003,"label":1,"features":{"zzz":"a"}}'),
    ("nonfinite_weight", '{"id":9004,"label":1,"features":{"C1":"a"},"weight":{"C1":1e999}}'),
    ("oversized", json.dumps({"id": 9005, "label": 1, "features": {"C1": "x" * 5000}})),
]
valid = open("valid.json").read().splitlines()
out, expect = [], []
for i, line in enumerate(valid):
    out.append(line)
    if i % 50 == 10:                      # invalid events spread through the stream
        for reason, b in bad:
            out.append(b); expect.append((reason, b))
open("input.json", "w").write("\n".join(out) + "\n")
open("expect_dlq.txt", "w").write("".join(f"{r}\t{b}\n" for r, b in expect))
print(len(out), len(valid), len(expect))
PY
N_IN=$(wc -l <input.json)
N_VALID=$(wc -l <valid.json)
N_BAD=$(wc -l <expect_dlq.txt)
timeout 60 kcat -P -b "$BS" -t events <input.json || fail "produce input"

"$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
    --key-field C1 --batch-size 40 --linger 20ms \
    --set ingest.schema=schema.txt --set ingest.schema.strict=true \
    --set ingest.max_features=50 --set ingest.max_record_bytes=4096 \
    "${KAFKA_TEST_SETS[@]}" 2>ingest.err &
ING=$!
PIDS+=("$ING")

count_out() {
    dump_examples examples ex.txt || return 1
    N_EX=$(wc -l <ex.txt)
    N_DLQ=$(timeout 30 kcat -C -b "$BS" -t examples.dlq -e -q -f 'x\n' | wc -l)
}
for _ in $(seq 1 60); do
    count_out
    [ $((N_EX + N_DLQ)) -ge "$N_IN" ] && break
    sleep 1
done
[ "$N_EX" -eq "$N_VALID" ] || fail "examples $N_EX != valid events $N_VALID"
[ "$N_DLQ" -eq "$N_BAD" ] || fail "dead letters $N_DLQ != invalid events $N_BAD"
[ $((N_EX + N_DLQ)) -eq "$N_IN" ] || fail "output $N_EX + dlq $N_DLQ != input $N_IN"
# A new group starts every partition at its earliest offset, resolved to the offset itself (0
# here) at the assignment, so that all partitions are fetched at once.
[ "$(grep -c 'kafka partition assigned topic=events partition=[0-2] offset=0$' ingest.err)" -eq 3 ] ||
    fail "start offsets: $(grep 'partition assigned' ingest.err)"

# Dead letters: reason header, source headers, raw bytes unchanged, in input order.
timeout 30 kcat -C -b "$BS" -t examples.dlq -e -q -f '%h\n%R%s' >dlq.raw
python3 - <<'PY' || fail "dead letter contents"
import re, struct
data = open("dlq.raw", "rb").read()
expect = [l.split("\t", 1) for l in open("expect_dlq.txt").read().splitlines()]
got, i = [], 0
while i < len(data):
    nl = data.index(b"\n", i)
    hdr = data[i:nl].decode(); i = nl + 1
    (n,) = struct.unpack(">i", data[i:i + 4]); i += 4
    got.append((hdr, data[i:i + n].decode())); i += n
assert len(got) == len(expect), (len(got), len(expect))
# Input partitions interleave, so compare as multisets: each raw event with its reason.
reason_of = {raw: reason for reason, raw in expect}
assert sorted(p for _, p in got) == sorted(raw for _, raw in expect)
offsets = set()
for hdr, payload in got:
    reason = reason_of[payload]
    assert re.search(r"(^|,)reason=%s(,|$)" % reason, hdr), (hdr, reason)
    assert "source.topic=events" in hdr, hdr
    part = re.search(r"source\.partition=(\d+)", hdr)
    off = re.search(r"source\.offset=(\d+)", hdr)
    assert part and off, hdr
    offsets.add((part.group(1), off.group(1)))
assert len(offsets) == len(got)
PY

# Examples: the same ids, labels and feature fields as the input; one C1 value, one partition.
python3 - <<'PY' || fail "example contents"
import json
schema = {l.split(" = ")[0]: int(l.split(" = ")[1]) for l in open("schema.txt").read().splitlines()}
want = {}
for line in open("valid.json"):
    e = json.loads(line)
    want[e["id"]] = (float(e["label"]), sorted(schema[k] for k in e["features"]))
seen, c1part = {}, {}
for line in open("ex.txt"):
    part, eid, label, nf, fk = line.split(" ", 4)
    eid = int(eid)
    assert eid not in seen, f"duplicate example {eid}"
    pairs = [tuple(map(int, p.split(":"))) for p in fk.split(",") if p.strip()]
    seen[eid] = (float(label), sorted(f for f, _ in pairs))
    for f, k in pairs:
        if f == schema["C1"]:
            assert c1part.setdefault(k, part) == part, f"C1 key {k} in partitions {c1part[k]}, {part}"
assert set(seen) == set(want), (len(seen), len(want))
for eid, (label, flds) in want.items():
    assert seen[eid] == (label, flds), (eid, seen[eid], label, flds)
assert len(c1part) > 1
PY

# SIGTERM: exit 0, offsets committed (a restart in the same group reads nothing new).
kill -TERM "$ING"
wait "$ING" || fail "ingest exit status $? after SIGTERM"
grep -q "ingest stopped events=$N_IN " ingest.err || fail "stop line: $(grep 'ingest stopped' ingest.err)"
"$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" --format json \
    --set ingest.schema=schema.txt "${KAFKA_TEST_SETS[@]}" 2>ingest2.err &
ING2=$!
PIDS+=("$ING2")
for _ in $(seq 1 100); do grep -q "partition assigned" ingest2.err && break; sleep 0.1; done
grep -q "partition assigned" ingest2.err || fail "restart never got partitions"
sleep 2
kill -TERM "$ING2"
wait "$ING2" || fail "second ingest exit status"
grep -q "ingest stopped events=0 " ingest2.err || fail "restart re-read: $(grep 'ingest stopped' ingest2.err)"

# A bad kafka.* property is a startup error naming it.
if "$SPARROW" ingest --in "kafka://$BS/events" --out "kafka://$BS/examples" \
    --set kafka.no.such.property=1 2>bad.err; then fail "bad property accepted"; fi
grep -q "kafka.no.such.property" bad.err || fail "bad property not named: $(cat bad.err)"
echo PASS
