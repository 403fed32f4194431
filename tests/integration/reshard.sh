#!/usr/bin/env bash
# `sparrow reshard` end to end. Two shards, the coordinator and a Kafka trainer take a real
# checkpoint epoch E; it is resharded 2 -> 3, 3 -> 2 and 2 -> 1; each result is restored into
# fresh `sparrow pserver` processes (pserver.restore) and every row of E is pulled from them and
# compared bit for bit (reshard_check compare); the original and the 3-shard set are trained
# with the same pushes and stay bit-identical (optimizer state carried over); bad input is refused
# with nothing written.
SPARROW=$1
DIR=$2
CHECK=$3
rm -rf "$DIR" && mkdir -p "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
DIM=5

# ---- a real checkpoint ----
start_broker examples:2
CK="$DIR/ck"
# publishing on: the manifest carries update-stream offsets, which the reshard must keep
start_shards 2 $DIM --set pserver.checkpoint.dir="$CK" --set pserver.restore=false \
    --set pserver.publish.brokers="$BS" --set pserver.publish.interval=200ms
start_coordinator hybrid:10 "$CK" --set coordinator.checkpoint.steps=20
start_coord_trainer "$SHARDS" "$COORD_PORT" --set trainer.shutdown.grace=3s
start_gen 20000 4000
wait_for "checkpoint epoch 2" 90 grep -q "checkpoint completed epoch=2 " "$DIR/coord.log"
kill -TERM "$TR" "$GEN" 2>/dev/null || true
wait "$TR" || fail "trainer exit status after SIGTERM"
wait "$GEN" 2>/dev/null || true
kill -TERM "$COORD" && wait "$COORD" || fail "coordinator exit status after SIGTERM"
kill -TERM "${SHARD_PIDS[@]}"
for pid in "${SHARD_PIDS[@]}"; do wait "$pid" || fail "shard exit status after SIGTERM"; done
kill -TERM "$MOCK" 2>/dev/null || true
# only the LATEST epoch, on its own (a later epoch may hold shard checkpoints without MANIFEST)
E=$(cat "$CK/checkpoints/LATEST")
ORIG="$DIR/orig"
mkdir -p "$ORIG/checkpoints"
cp -a "$CK/checkpoints/$E" "$ORIG/checkpoints/$E"
echo "$E" >"$ORIG/checkpoints/LATEST"
echo "reshard: a checkpoint of 2 shards at epoch $E"

# ---- bad input: refused, nothing written ----
expect_refused() { # WHAT TO ARGS...: exit 1 or 2 with a message, TO not created
    local what=$1 to=$2
    shift 2
    set +e
    "$SPARROW" reshard "$@" >"$DIR/refused.out" 2>"$DIR/refused.err"
    local rc=$?
    set -e
    [ $rc -eq 1 ] || [ $rc -eq 2 ] || fail "$what: exit $rc"
    [ -s "$DIR/refused.err" ] || fail "$what: no message"
    [ ! -e "$to" ] || [ -z "$(ls -A "$to")" ] || fail "$what: $to written"
    ls -d "$to".reshard-* 2>/dev/null && fail "$what: temporary directory left"
    echo "reshard: refused ($what): $(head -1 "$DIR/refused.err")"
}
expect_refused "0 shards" "$DIR/x" --from "$ORIG/checkpoints/$E" --shards 0 --to "$DIR/x"
expect_refused "1025 shards" "$DIR/x" --from "$ORIG/checkpoints/$E" --shards 1025 --to "$DIR/x"
expect_refused "no such checkpoint" "$DIR/x" --from "$ORIG/checkpoints/999" --shards 3 --to "$DIR/x"
mkdir -p "$DIR/full" && touch "$DIR/full/something"
set +e
"$SPARROW" reshard --from "$ORIG/checkpoints/$E" --shards 3 --to "$DIR/full" 2>"$DIR/refused.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "not empty" "$DIR/refused.err" || fail "a non-empty --to accepted"
[ "$(ls -A "$DIR/full")" = something ] || fail "the non-empty --to was changed"
# a corrupt shard checkpoint (one byte of an SST file)
BAD="$DIR/bad"
cp -a "$ORIG" "$BAD"
sst=$(ls -S "$BAD/checkpoints/$E/shard-1/"*.sst | head -1)
python3 - "$sst" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x5A
open(p + ".x", "wb").write(bytes(b))
PY
mv "$sst.x" "$sst"
expect_refused "corrupt shard checkpoint" "$DIR/x" --from "$BAD/checkpoints/$E" --shards 3 --to "$DIR/x"
grep -q "does not verify" "$DIR/refused.err" || fail "corruption not named"
# a corrupt manifest
rm -rf "$BAD" && cp -a "$ORIG" "$BAD"
printf 'x' >>"$BAD/checkpoints/$E/MANIFEST"
expect_refused "corrupt manifest" "$DIR/x" --from "$BAD/checkpoints/$E" --shards 3 --to "$DIR/x"
# a shard checkpoint missing
rm -rf "$BAD" && cp -a "$ORIG" "$BAD"
rm -rf "$BAD/checkpoints/$E/shard-0"
expect_refused "missing shard" "$DIR/x" --from "$BAD/checkpoints/$E" --shards 3 --to "$DIR/x"
rm -rf "$BAD"

# ---- reshard ----
"$SPARROW" reshard --from "$ORIG/checkpoints/$E" --shards 3 --to "$DIR/r3" >"$DIR/r3.out" \
    2>"$DIR/reshard-r3.log" || fail "reshard 2 -> 3"
cat "$DIR/r3.out"
mkdir "$DIR/r1" # an empty --to is accepted
"$SPARROW" reshard --from "$ORIG" --shards 1 --to "$DIR/r1" >"$DIR/r1.out" \
    2>"$DIR/reshard-r1.log" || fail "reshard 2 -> 1 (from the root's LATEST)"
"$SPARROW" reshard --from "$DIR/r3/checkpoints/$E/" --shards 2 --to "$DIR/r2" >"$DIR/r2.out" \
    2>"$DIR/reshard-r2.log" || fail "reshard 3 -> 2"
ls -d "$DIR"/*.reshard-* 2>/dev/null && fail "temporary directory left"
"$CHECK" manifests "$ORIG" "$E" "$DIR/r3" 3 | tee "$DIR/manifests.out" || fail "manifest of r3"
grep -q " 0 update offsets" "$DIR/manifests.out" && fail "no update offsets in the manifest to carry"
"$CHECK" manifests "$ORIG" "$E" "$DIR/r1" 1 || fail "manifest of r1"
"$CHECK" manifests "$ORIG" "$E" "$DIR/r2" 2 || fail "manifest of r2"

# start_set NAME ROOT N: N fresh shards restoring ROOT; sets EPS (endpoints) and SET_PIDS.
start_set() {
    local name=$1 root=$2 n=$3 i port
    EPS=""
    SET_PIDS=()
    for ((i = 0; i < n; i++)); do
        port=$(free_port)
        "$SPARROW" pserver --listen "tcp://127.0.0.1:$port" --shard "$i" --shards "$n" \
            --dim $DIM --data-dir "$DIR/$name-data-$i" --http-port 0 --memory-mb 64 \
            --set pserver.checkpoint.dir="$root" --set pserver.restore=true \
            --set pserver.publish.interval=0 >"$DIR/$name-$i.log" 2>&1 &
        SET_PIDS+=("$!")
        PIDS+=("$!")
        EPS="${EPS:+$EPS,}tcp://127.0.0.1:$port"
    done
    for ((i = 0; i < n; i++)); do
        wait_for "$name shard $i restoring epoch $E" 30 \
            grep -q "restored checkpoint .*epoch=$E" "$DIR/$name-$i.log"
    done
}
stop_set() {
    local p
    for p in "$@"; do kill -TERM "$p"; done
    for p in "$@"; do wait "$p" || fail "shard exit status after SIGTERM"; done
}

start_set orig "$ORIG" 2
ORIG_EPS=$EPS
ORIG_PIDS=("${SET_PIDS[@]}")
"$CHECK" compare "$ORIG" "$E" "$ORIG_EPS" || fail "the original shards do not serve epoch $E"
start_set r3 "$DIR/r3" 3
"$CHECK" compare "$ORIG" "$E" "$EPS" || fail "2 -> 3: rows differ"
"$CHECK" train "$ORIG" "$E" "$ORIG_EPS" "$EPS" 5 || fail "2 -> 3: training diverges"
stop_set "${SET_PIDS[@]}" "${ORIG_PIDS[@]}"
start_set r1 "$DIR/r1" 1
"$CHECK" compare "$ORIG" "$E" "$EPS" || fail "2 -> 1: rows differ"
stop_set "${SET_PIDS[@]}"
start_set r2 "$DIR/r2" 2
"$CHECK" compare "$ORIG" "$E" "$EPS" || fail "3 -> 2: rows differ"
stop_set "${SET_PIDS[@]}"
echo "reshard: ok"
