#!/usr/bin/env bash
# One seed through `sparrow gen` in each format is one stream: the three runs report the same
# statistics, and the JSON and Criteo files agree line by line (labels, categorical values, and
# integer columns whose Criteo buckets are the JSON values). Key-level equality after parsing with
# ingest's readers is checked by test_gen (test_gen_formats_read_back_identically).
# Usage: gen_roundtrip.sh <sparrow binary> <scratch dir>
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=()
N=5000

for fmt in pb json criteo; do
    "$SPARROW" gen --n $N --seed 21 --fields 39 --new-values 0.01 --drift 5 --format "$fmt" \
        --out "s.$fmt" 2>"$fmt.log"
done
stats() { grep ' gen done ' "$1" | grep -o 'examples=[^ ]* ctr=[^ ]* mean_p=[^ ]* bayes_logloss=[^ ]* bayes_auc=[^ ]*'; }
[ -n "$(stats pb.log)" ] || fail "no summary: $(cat pb.log)"
[ "$(stats pb.log)" = "$(stats json.log)" ] || fail "pb and json differ: $(stats pb.log) / $(stats json.log)"
[ "$(stats pb.log)" = "$(stats criteo.log)" ] || fail "pb and criteo differ: $(stats pb.log) / $(stats criteo.log)"
for f in s.json s.criteo; do
    [ "$(wc -l <"$f")" -eq $N ] || fail "$f: expected $N lines"
done

# JSON -> the Criteo line it should match: label, I1..I13 buckets, C1..C26 hex; id and ts
awk -F'\t' -v OFS='\t' '
    function bucket(x,   l) { if (x <= 2) return x; l = log(x); return int(l * l) }
    NR == FNR {
        line = $0
        if (!match(line, /"id":[0-9]+/)) { print "json line " NR ": no id"; bad = 1; exit 1 }
        id = substr(line, RSTART + 5, RLENGTH - 5)
        if (id + 0 != NR - 1) { print "json line " NR ": id " id; bad = 1; exit 1 }
        match(line, /"ts":[0-9]+/); ts = substr(line, RSTART + 5, RLENGTH - 5)
        if (ts + 0 != 1700000000000 + NR - 1) { print "json line " NR ": ts " ts; bad = 1; exit 1 }
        match(line, /"label":[01]/); want[NR] = substr(line, RSTART + 8, 1)
        for (c = 1; c <= 13; c++) {
            match(line, "\"I" c "\":\"[0-9]+\""); v = substr(line, RSTART, RLENGTH)
            sub(/^"I[0-9]+":"/, "", v); sub(/"$/, "", v); want[NR] = want[NR] OFS v
        }
        for (c = 1; c <= 26; c++) {
            match(line, "\"C" c "\":\"[0-9a-f]+\""); v = substr(line, RSTART, RLENGTH)
            sub(/^"C[0-9]+":"/, "", v); sub(/"$/, "", v); want[NR] = want[NR] OFS v
        }
        next
    }
    {
        got = $1
        for (c = 2; c <= 14; c++) got = got OFS bucket($c + 0)
        for (c = 15; c <= 40; c++) got = got OFS $c
        if (NF != 40) { print "criteo line " FNR ": " NF " columns"; bad = 1; exit 1 }
        if (got != want[FNR]) { print "line " FNR ":\n json   " want[FNR] "\n criteo " got; bad = 1; exit 1 }
    }
    END { if (!bad) print "json and criteo agree on " FNR " lines" }
' s.json s.criteo || fail "json and criteo disagree"

# pb: sizes consistent with 39 features per example (a length-delimited record of 39 5-byte
# field ids and 39 fixed64 keys is at least 39 * 13 bytes)
size=$(stat -c %s s.pb)
[ "$size" -gt $((N * 39 * 13)) ] || fail "pb file too small: $size bytes"
rm -f s.pb s.json s.criteo
echo "gen_roundtrip: ok"
