#!/usr/bin/env bash
# `sparrow ingest` from a file to a file: valid events become length-delimited ExampleBatch
# records, invalid ones go to <out>.dlq with their reason; counts add up exactly.
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
fail() { echo "FAIL: $*"; cat ingest.err 2>/dev/null | tail -20; exit 1; }
"$SPARROW" gen --n 500 --format json --out valid.json 2>gen.err || fail "gen"
{
    head -250 valid.json
    echo '{not json'
    echo '{"label":3,"features":{"a":"b"}}'
    echo '{"label":1,"features":{"a":"b"},"weight":{"a":1e999}}'
    tail -250 valid.json
} >input.json
"$SPARROW" ingest --in file:input.json --out file:out.pb --format json --batch-size 64 \
    --set ingest.http.port=-1 2>ingest.err || fail "exit status"
python3 - <<'PY' || fail "output"
data = open("out.pb", "rb").read()
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
i = batches = examples = 0
while i < len(data):
    n, i = varint(data, i)
    rec = data[i:i + n]; i += n; batches += 1
    j = 0
    while j < len(rec):
        tag, j = varint(rec, j)
        assert tag == (1 << 3 | 2), tag
        m, j = varint(rec, j); j += m; examples += 1
assert examples == 500, examples
assert batches == 8, batches          # 500 examples in batches of 64
PY
[ "$(cut -f1 out.pb.dlq | tr '\n' ' ')" = "undecodable bad_label nonfinite_weight " ] ||
    fail "dead letters: $(cut -f1 out.pb.dlq)"
grep -q "ingest stopped events=503 examples=500 rejected=3 exit=0" ingest.err || fail "summary"

# ingest.batch.max_bytes cuts a record before the example that would take it past the limit, and
# the records hold the same examples, in the same order, as one uncut record (the example that
# opened a new record was once overwritten by the next event's, as its memory was reused).
"$SPARROW" ingest --in file:valid.json --out file:whole.pb --format json \
    --set ingest.http.port=-1 2>ingest.err || fail "exit status (whole)"
"$SPARROW" ingest --in file:valid.json --out file:cut.pb --format json \
    --set ingest.batch.max_bytes=4096 --set ingest.http.port=-1 2>ingest.err || fail "exit status (cut)"
python3 - <<'PY' || fail "records cut at max_bytes"
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def records(path):
    data = open(path, "rb").read(); i = 0; recs = []
    while i < len(data):
        n, i = varint(data, i); recs.append(data[i:i + n]); i += n
    return recs
def examples(recs):
    out = []
    for rec in recs:
        j = 0
        while j < len(rec):
            tag, j = varint(rec, j); m, j = varint(rec, j); out.append(rec[j:j + m]); j += m
    return out
whole, cut = records("whole.pb"), records("cut.pb")
assert len(whole) == 1 and len(cut) > 10, (len(whole), len(cut))
assert max(len(r) for r in cut) <= 4096, max(len(r) for r in cut)
a, b = examples(whole), examples(cut)
assert len(a) == len(b) == 500, (len(a), len(b))
bad = [i for i in range(500) if a[i] != b[i]]
assert not bad, "examples differ at %s" % bad[:10]
PY

# The other two formats, file to file: every generated event becomes one example.
count_examples() { # file
    python3 - "$1" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
i = examples = 0
while i < len(data):
    n, i = varint(data, i)
    rec = data[i:i + n]; i += n
    j = 0
    while j < len(rec):
        tag, j = varint(rec, j)
        m, j = varint(rec, j); j += m; examples += 1
print(examples)
PY
}
for fmt in criteo pb; do
    "$SPARROW" gen --n 300 --format "$fmt" --out "valid.$fmt" 2>gen.err || fail "gen $fmt"
    "$SPARROW" ingest --in "file:valid.$fmt" --out "file:out.$fmt" --format "$fmt" \
        --set ingest.http.port=-1 2>ingest.err || fail "exit status ($fmt)"
    [ "$(count_examples "out.$fmt")" -eq 300 ] || fail "$fmt: $(count_examples "out.$fmt") examples"
    [ ! -s "out.$fmt.dlq" ] || fail "$fmt: dead letters"
done

# pb input: a valid sparrow.Example goes into the record as it came (decoding it gave the example
# that was validated), here with its fields in reverse order, which a re-packing would reorder.
python3 - <<'PY' || fail "writing reordered pb input"
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def put(v):
    out = bytearray()
    while True:
        out.append((v & 0x7f) | (0x80 if v > 0x7f else 0)); v >>= 7
        if not v: return bytes(out)
data = open("valid.pb", "rb").read(); i = 0; out = b""
while i < len(data):
    n, i = varint(data, i); rec = data[i:i + n]; i += n; j = 0; fields = []
    while j < len(rec):
        start = j; tag, j = varint(rec, j); wt = tag & 7
        if wt == 0: _, j = varint(rec, j)
        elif wt == 1: j += 8
        elif wt == 5: j += 4
        elif wt == 2: m, j = varint(rec, j); j += m
        else: raise SystemExit("wire type %d" % wt)
        fields.append(rec[start:j])
    rev = b"".join(reversed(fields))
    out += put(len(rev)) + rev
open("reordered.pb", "wb").write(out)
PY
"$SPARROW" ingest --in file:reordered.pb --out file:out.reordered --format pb \
    --set ingest.http.port=-1 2>ingest.err || fail "exit status (reordered pb)"
python3 - <<'PY' || fail "pb examples not passed through as they came"
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def records(path):
    data = open(path, "rb").read(); i = 0; recs = []
    while i < len(data):
        n, i = varint(data, i); recs.append(data[i:i + n]); i += n
    return recs
inp, out = records("reordered.pb"), []
for rec in records("out.reordered"):
    j = 0
    while j < len(rec):
        tag, j = varint(rec, j); m, j = varint(rec, j); out.append(rec[j:j + m]); j += m
assert len(inp) == len(out) == 300, (len(inp), len(out))
assert inp == out
PY
echo PASS
