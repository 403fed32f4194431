#!/usr/bin/env bash
# Malformed input records are counted and skipped, in every file format: JSON lines with
# undecodable lines, out-of-range labels and an oversized line; Criteo TSV with a short line and
# a bad label; pb with a truncated last record. Every good example is trained (in-process shard),
# the run exits 0, and the counts show in the final line.
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

train() { # NAME FORMAT FILE [ARGS...]
    local name=$1 format=$2 file=$3
    shift 3
    timeout 60 "$SPARROW" trainer --in "file:$file" --format "$format" --shards inproc \
        --model lr --batch 128 --backend cpu --http-port -1 "$@" >"$DIR/$name.log" 2>&1 ||
        fail "$name: exit status"
    grep ' finished ' "$DIR/$name.log" | sed 's/^.* finished /'"$name"': /'
    [ "$(kv status "$DIR/$name.log")" = success ] || fail "$name: status"
}

# JSON: 5000 good lines; every 100th line is followed by garbage and a label of 7.
"$SPARROW" gen --n 5000 --seed 8 --format json --out "$DIR/good.json" 2>"$DIR/gen.log" || fail "gen"
awk '{print} NR % 100 == 0 {print "{\"label\": 1, \"features\": [not json"; print "{\"label\": 7, \"features\": {\"a\": \"b\"}}"}' \
    "$DIR/good.json" >"$DIR/bad.json"
python3 -c 'print("{\"label\": 1, \"features\": {\"a\": \"" + "x" * 10000 + "\"}}")' >>"$DIR/bad.json"
train json json "$DIR/bad.json" --set trainer.max_record_bytes=4096
[ "$(kv examples "$DIR/json.log")" = 5000 ] || fail "json: examples"
[ "$(kv rejected "$DIR/json.log")" = 101 ] || fail "json: rejected"
grep -q "input record skipped" "$DIR/json.log" || fail "json: skipped records not logged"

# Criteo: 3000 good lines, a short line and a label of 2.
"$SPARROW" gen --n 3000 --seed 8 --format criteo --out "$DIR/good.tsv" 2>>"$DIR/gen.log" || fail "gen"
{ head -1000 "$DIR/good.tsv"; printf '1\t2\t3\n'; printf '2'; head -1 "$DIR/good.tsv" | cut -c2-; tail -n +1001 "$DIR/good.tsv"; } >"$DIR/bad.tsv"
train criteo criteo "$DIR/bad.tsv"
[ "$(kv examples "$DIR/criteo.log")" = 3000 ] || fail "criteo: examples"
[ "$(kv rejected "$DIR/criteo.log")" = 2 ] || fail "criteo: rejected"

# pb: 2000 good records, then a truncated one (the stream ends there).
"$SPARROW" gen --n 2001 --seed 8 --out "$DIR/good.pb" 2>>"$DIR/gen.log" || fail "gen"
head -c $(($(stat -c %s "$DIR/good.pb") - 20)) "$DIR/good.pb" >"$DIR/bad.pb"
train pb pb "$DIR/bad.pb"
[ "$(kv examples "$DIR/pb.log")" = 2000 ] || fail "pb: examples"
[ "$(kv rejected "$DIR/pb.log")" = 1 ] || fail "pb: rejected"

# A missing input file fails at start with a clear message and a non-zero status.
if "$SPARROW" trainer --in "file:$DIR/absent.pb" --shards inproc --http-port -1 \
    >"$DIR/absent.log" 2>&1; then
    fail "a missing input file did not fail"
fi
grep -q "trainer failed to start" "$DIR/absent.log" || fail "no start failure message"
echo "trainer_malformed: ok"
