#!/usr/bin/env bash
# `sparrow gen` is a function of its seed alone: equal seeds write identical bytes, another seed
# other bytes, the first N examples do not depend on --n or on the output path, and the run ends
# with its summary line (also when stopped by SIGTERM).
# Usage: gen_determinism.sh <sparrow binary> <scratch dir>
set -euo pipefail
SPARROW=$1
DIR=$2
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=()

"$SPARROW" gen --n 200000 --seed 7 --format pb --out a.pb 2>a.log
"$SPARROW" gen --n 200000 --seed 7 --format pb --out b.pb 2>b.log
cmp a.pb b.pb || fail "two runs with seed 7 differ"
"$SPARROW" gen --n 200000 --seed 8 --format pb --out c.pb 2>c.log
if cmp -s a.pb c.pb; then fail "seeds 7 and 8 wrote the same bytes"; fi

# gen.model=fm (the default) writes the bytes it wrote before gen.model=deep existed (sha-256 of
# these 100000 examples, recorded at commit 618d192)
"$SPARROW" gen --n 100000 --seed 7 --format pb --out fm.pb 2>/dev/null
"$SPARROW" gen --set gen.model=fm --n 100000 --seed 7 --format pb --out fm2.pb 2>/dev/null
want=726c91b7d024e4d1479f6fe915a757ec0275283166c9cb1429993e656b1a4994
[ "$(sha256sum <fm.pb | cut -d' ' -f1)" = "$want" ] || fail "the fm stream's bytes changed"
cmp fm.pb fm2.pb || fail "gen.model=fm differs from the default"
cmp -n "$(stat -c %s fm.pb)" fm.pb a.pb || fail "--n 100000 is not a prefix of --n 200000"

# gen.model=deep: deterministic, a shorter run a prefix of a longer one, other bytes than fm
"$SPARROW" gen --set gen.model=deep --n 30000 --seed 7 --out d1.pb 2>d1.log
"$SPARROW" gen --set gen.model=deep --n 30000 --seed 7 --out d2.pb 2>/dev/null
cmp d1.pb d2.pb || fail "two deep runs with seed 7 differ"
"$SPARROW" gen --set gen.model=deep --n 1000 --seed 7 --out - 2>/dev/null >dh.pb
cmp -n "$(stat -c %s dh.pb)" dh.pb d1.pb || fail "deep: --n 1000 is not a prefix of --n 30000"
if cmp -s d1.pb fm.pb; then fail "deep wrote the fm stream"; fi
grep -q 'gen start .*model=deep' d1.log || fail "deep: no model=deep in: $(cat d1.log)"
grep -q ' gen done .*examples=30000' d1.log || fail "deep: no summary in: $(cat d1.log)"
rc=0
"$SPARROW" gen --set gen.model=dnn --n 10 >/dev/null 2>err.log || rc=$?
[ "$rc" -eq 2 ] || fail "gen.model=dnn: exit $rc"
grep -q 'fm|deep' err.log || fail "gen.model=dnn: the message does not name the values: $(cat err.log)"
rc=0
"$SPARROW" gen --set gen.model=deep --set gen.deep.hidden=8,0 --n 10 >/dev/null 2>err.log || rc=$?
[ "$rc" -eq 2 ] || fail "gen.deep.hidden=8,0: exit $rc"
grep -q 'gen.deep.hidden' err.log || fail "gen.deep.hidden=8,0: $(cat err.log)"

# the summary: examples, CTR, Bayes-optimal logloss and AUC, bytes, rate
summary=$(grep ' gen done ' a.log) || fail "no summary line in: $(cat a.log)"
for key in examples=200000 "ctr=0\." "bayes_logloss=0\." "bayes_auc=0\." "auc_err=" \
    "bytes=$(stat -c %s a.pb) " "examples_per_s=" "stopped=0"; do
    grep -q -- "$key" <<<"$summary" || fail "summary lacks $key: $summary"
done
# equal seeds report equal statistics (the timing fields aside)
stats() { grep -o 'ctr=[^ ]* mean_p=[^ ]* bayes_logloss=[^ ]* bayes_auc=[^ ]*' "$1"; }
[ "$(stats a.log)" = "$(stats b.log)" ] || fail "statistics differ: $(stats a.log) / $(stats b.log)"

# a shorter run to stdout is a prefix of the long one
"$SPARROW" gen --n 1000 --seed 7 --format pb --out - >head.pb 2>head.log
[ -s head.pb ] || fail "nothing on stdout"
cmp -n "$(stat -c %s head.pb)" head.pb a.pb || fail "--n 1000 to stdout is not a prefix of --n 200000"

# the text formats are deterministic too, and properties set by --set equal their flags
for fmt in json criteo; do
    "$SPARROW" gen --n 20000 --seed 7 --format "$fmt" --out "a.$fmt" 2>/dev/null
    "$SPARROW" gen --set gen.n=20000 --set gen.seed=7 --set "gen.format=$fmt" \
        --set "gen.out=b.$fmt" 2>/dev/null
    cmp "a.$fmt" "b.$fmt" || fail "$fmt output differs between runs"
    [ "$(wc -l <"a.$fmt")" -eq 20000 ] || fail "$fmt: expected 20000 lines"
done

# SIGTERM stops an endless run cleanly, with its summary
"$SPARROW" gen --n 0 --seed 7 --out /dev/null 2>term.log &
pid=$!
for _ in $(seq 100); do
    grep -q ' gen start ' term.log 2>/dev/null && break
    sleep 0.05
done
sleep 0.2
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit $rc"
grep ' gen done ' term.log | grep -c 'stopped=1' >/dev/null || fail "SIGTERM: no summary: $(cat term.log)"

# a reader that goes away ends an endless run cleanly
timeout 60 "$SPARROW" gen --n 0 --seed 7 2>pipe.log | head -c 100000 >/dev/null
grep -q 'output closed by its reader' pipe.log || fail "closed pipe: $(cat pipe.log)"
grep ' gen done ' pipe.log | grep -c 'stopped=1' >/dev/null || fail "closed pipe: no summary"

# configuration errors exit 2 with a message
rc=0
"$SPARROW" gen --fields 40 --format criteo --out x.tsv 2>err.log || rc=$?
[ "$rc" -eq 2 ] || fail "40 fields in criteo: exit $rc"
grep -q criteo err.log || fail "40 fields in criteo: no message"
rc=0
"$SPARROW" gen --vocab-min 100 --vocab-max 10 2>err.log || rc=$?
[ "$rc" -eq 2 ] || fail "vocab.min > vocab.max: exit $rc"
rc=0
"$SPARROW" gen --n 100000 --out /dev/full 2>err.log || rc=$?
[ "$rc" -eq 1 ] || fail "/dev/full: exit $rc"
grep -q 'write failed.*No space left' err.log || fail "/dev/full: $(cat err.log)"
"$SPARROW" gen --help | grep -c 'gen.latent_dim' >/dev/null || fail "--help lacks the property table"
"$SPARROW" gen --seed 3 --dump-config | grep -c '^gen.seed = 3' >/dev/null || fail "--dump-config"

rm -f ./*.pb ./*.json ./*.criteo
echo "gen_determinism: ok"
