#!/usr/bin/env bash
# Disk full while checkpointing (checkpoints on a small tmpfs): the checkpoint fails with a clear
# error, the previous checkpoint stays intact and loadable, the shard keeps serving and reports
# not-ready until space returns. Exits 77 (skipped) where tmpfs cannot be mounted.
set -euo pipefail
SPARROW=$1
DIR=$2
CLIENT=$3
DIM=8
if mountpoint -q "$DIR/ckpt" 2>/dev/null; then umount "$DIR/ckpt" || true; fi
rm -rf "$DIR"
mkdir -p "$DIR/ckpt"
. "$(dirname "$0")/pserver_lib.sh"
if ! mount -t tmpfs -o size=2m tmpfs "$DIR/ckpt" 2>/dev/null; then
    echo "pserver_diskfull: cannot mount tmpfs here (needs root); skipped"
    exit 77
fi
trap 'kill -9 $PS_PID 2>/dev/null || true; umount "$DIR/ckpt" 2>/dev/null || true' EXIT

HTTP_PORT=$(free_port)
ARGS=(--data-dir "$DIR/data" --dim $DIM --memory-mb 64 --http-port "$HTTP_PORT"
      --set pserver.checkpoint.dir="$DIR/ckpt" --set rocksdb.options=compression=kNoCompression)
start_ps ps0 "${ARGS[@]}"
"$CLIENT" "$PS_EP" $DIM train 1 4 1000 1 || fail "train small"
"$CLIENT" "$PS_EP" $DIM checkpoint 1 | grep -q '^ok ' || fail "checkpoint 1 (small) failed"
"$CLIENT" "$PS_EP" $DIM dump 1000 "$DIR/a.bin" || fail "dump a"

# grow the model well past the tmpfs: the checkpoint must fail cleanly
"$CLIENT" "$PS_EP" $DIM train 2 200 1000000 1 || fail "train big"
out=$("$CLIENT" "$PS_EP" $DIM checkpoint 2 || true)
echo "checkpoint 2: $out"
case "$out" in
    "error 5 "*) ;;
    *) fail "checkpoint 2 should fail with UNAVAILABLE, got: $out" ;;
esac
echo "$out" | grep -qi 'space' || fail "error does not say the disk is full: $out"
[ ! -e "$DIR/ckpt/checkpoints/2/shard-0" ] || fail "a partial checkpoint 2 was left"
[ -z "$(ls -A "$DIR/ckpt/checkpoints/2" 2>/dev/null)" ] || fail "temporary files left behind"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/readyz")
[ "$code" = 503 ] || fail "readyz should be 503 while the disk is full, got $code"
if "$CLIENT" "$PS_EP" $DIM health; then fail "health should say not ready"; fi
# still serving
"$CLIENT" "$PS_EP" $DIM train 3 2 1000 1 || fail "train while disk full"
curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | grep -c '^sparrow_ps_disk_full 1' >/dev/null ||
    fail "disk_full gauge not set"

# space returns: ready again, checkpoints work
mount -o remount,size=512m "$DIR/ckpt" || fail "remount"
for _ in $(seq 1 50); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/readyz")
    [ "$code" = 200 ] && break
    sleep 0.2
done
[ "$code" = 200 ] || fail "readyz did not come back after space returned"
"$CLIENT" "$PS_EP" $DIM checkpoint 3 | grep -q '^ok ' || fail "checkpoint 3 after space returned"

# the previous checkpoint is intact and loadable: restart without checkpoint 3
rm -rf "$DIR/ckpt/checkpoints/3"
kill -9 $PS_PID
wait $PS_PID 2>/dev/null || true
start_ps ps1 "${ARGS[@]}"
"$CLIENT" "$PS_EP" $DIM dump 1000 "$DIR/b.bin" || fail "dump b"
cmp -s "$DIR/a.bin" "$DIR/b.bin" || fail "checkpoint 1 did not restore intact"
kill -TERM $PS_PID
wait $PS_PID || fail "non-zero exit after SIGTERM"
echo "pserver_diskfull: ok"
