#!/usr/bin/env bash
# `sparrow ingest` from a file to a file: valid events become length-delimited ExampleBatch
# records, invalid ones go to <out>.dlq with their reason; counts add up exactly.
set -euo pipefail
SPARROW=$1
DIR=$2
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)" # pbwire.py
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=(ingest.err)
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
from pbwire import records, batch_examples
recs = records("out.pb")
examples = sum(len(batch_examples(r)) for r in recs)
assert examples == 500, examples
assert len(recs) == 8, len(recs)      # 500 examples in batches of 64
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
from pbwire import records, batch_examples
def examples(recs):
    return [ex for rec in recs for ex in batch_examples(rec)]
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
from pbwire import records, batch_examples
print(sum(len(batch_examples(r)) for r in records(sys.argv[1])))
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
from pbwire import records, fields, put_varint
out = b""
for rec in records("valid.pb"):
    rev = b"".join(raw for _, raw in reversed(fields(rec)))
    out += put_varint(len(rev)) + rev
open("reordered.pb", "wb").write(out)
PY
"$SPARROW" ingest --in file:reordered.pb --out file:out.reordered --format pb \
    --set ingest.http.port=-1 2>ingest.err || fail "exit status (reordered pb)"
python3 - <<'PY' || fail "pb examples not passed through as they came"
from pbwire import records, batch_examples
inp = records("reordered.pb")
out = [ex for rec in records("out.reordered") for ex in batch_examples(rec)]
assert len(inp) == len(out) == 300, (len(inp), len(out))
assert inp == out
PY
echo PASS
