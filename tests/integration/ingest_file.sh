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
echo PASS
