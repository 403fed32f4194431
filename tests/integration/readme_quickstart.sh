#!/usr/bin/env bash
# The README's quickstart ("your data -> a prediction"), run as written: the shell block after the
# `<!-- quickstart -->` marker, from a copy of the repository's clients/ and the built `sparrow`,
# with port 8080 replaced by a free one. Checks what the README says it shows: a trainer that
# learned (held-out logloss below the constant predictor's), a probability from serve, an export
# of the trained rows, a key from `sparrow hash`.
# usage: readme_quickstart.sh PATH_TO_SPARROW SCRATCH_DIR SOURCE_DIR
set -euo pipefail
SPARROW=$1
DIR=$2
SRC=$3
rm -rf "$DIR" && mkdir -p "$DIR/build"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=("$DIR/out.txt")
FAIL_TAIL=40

awk '/^<!-- quickstart -->$/ {on=1; next} on && /^```sh$/ {inb=1; next} inb && /^```$/ {exit}
     inb {print}' "$SRC/README.md" >"$DIR/quickstart.sh"
[ "$(wc -l <"$DIR/quickstart.sh")" -ge 5 ] || fail "no quickstart block in README.md"
PORT=$(free_port)
sed -i "s/8080/$PORT/g" "$DIR/quickstart.sh"
ln -s "$(cd "$(dirname "$SPARROW")" && pwd)/sparrow" "$DIR/build/sparrow"
cp -r "$SRC/clients" "$DIR/clients"
(cd "$DIR" && timeout 300 bash -euo pipefail quickstart.sh) >"$DIR/out.txt" 2>&1 ||
    fail "the quickstart failed"
cat "$DIR/out.txt"
python3 - "$DIR" <<'PY' || fail "the quickstart's output"
import json, re, sys
d = sys.argv[1]
out = open(d + "/out.txt").read()
# sparrow eval's report: "logloss    X" and "const_logloss    Y" lines (the held-out figures)
ll = re.search(r"^logloss\s+([0-9.]+)$", out, re.M)
const = re.search(r"^const_logloss\s+([0-9.]+) ", out, re.M)
assert ll and const, "no held-out logloss and constant predictor from sparrow eval"
ll, const = float(ll.group(1)), float(const.group(1))
assert ll < const, "held-out logloss %.4f not below the constant predictor's %.4f" % (ll, const)
p = re.search(r'\{"predictions":\[([0-9.e-]+)\]', out)
assert p and 0 < float(p.group(1)) < 1, "no probability from serve"
assert re.search(r"^[0-9]+ rows of dim 9$", out, re.M), "no export read back"
assert re.search(r"^[0-9]{1,20}$", out, re.M), "no key from sparrow hash"
meta = json.load(open(d + "/model-export/metadata.json"))
assert meta["rows"] > 1000, meta
print("readme_quickstart: held-out logloss %.4f (constant %.4f), p=%s, %d rows exported"
      % (ll, const, p.group(1), meta["rows"]))
PY
echo "readme_quickstart: ok"
