#!/usr/bin/env bash
# A user's mistakes fail loudly, by exit code and a message naming the cause (issue 18 §1): a file
# in another format than the one given, a compressed or empty file, a duration without a unit, a
# misspelt SPARROW_* variable; gzip and the default format (auto) simply work, and a few bad lines
# in a good file do not stop a run.
# usage: fail_loud.sh PATH_TO_SPARROW SCRATCH_DIR
SPARROW=$1
DIR=$2
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"

"$SPARROW" gen --n 600 --format criteo --out c.tsv 2>gen.log || fail "gen criteo"
"$SPARROW" gen --n 600 --format json --out j.json 2>>gen.log || fail "gen json"
gzip -k c.tsv

# expect_rc WANT LOG CMD...: runs CMD with stderr to LOG and checks its exit status.
expect_rc() {
    local want=$1 log=$2 rc=0
    shift 2
    "$@" 2>"$log" >/dev/null || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, want $want (log $log)"
}
# expect_line LOG TEXT: LOG holds TEXT (a fixed string).
expect_line() { grep -qF -- "$2" "$1" || fail "$1 lacks: $2"; }

TRAIN=(trainer --shards inproc --http-port -1 --set trainer.log.interval=0)

# The default format tells Criteo TSV and gzip from the bytes, and trains.
expect_rc 0 auto.log "$SPARROW" "${TRAIN[@]}" --in file:c.tsv.gz
expect_line auto.log "input format detected format=criteo compression=gzip"
expect_line auto.log 'finished examples=600 '

# The format given wins, and every record refused is a failed run naming both formats.
expect_rc 1 wrong.log "$SPARROW" "${TRAIN[@]}" --in file:c.tsv --format pb
expect_line wrong.log "records rejected (100%, above trainer.max_reject_ratio=0.5)"
expect_line wrong.log "read as trainer.format=pb but looks like Criteo TSV (criteo): set trainer.format=criteo"
expect_rc 1 json_as_criteo.log "$SPARROW" "${TRAIN[@]}" --in file:j.json --format criteo
expect_line json_as_criteo.log "looks like JSON lines (json)"

# A few bad lines in a good file: counted, the run succeeds.
{ head -300 j.json; echo '{"label": 7}'; echo 'not json'; tail -300 j.json; } >mostly.json
expect_rc 0 mostly.log "$SPARROW" "${TRAIN[@]}" --in file:mostly.json
expect_line mostly.log 'finished examples=600 '
expect_line mostly.log 'rejected=2 records=602'
# ... unless the ratio says none may be bad.
expect_rc 1 strict.log "$SPARROW" "${TRAIN[@]}" --in file:mostly.json \
    --set trainer.max_reject_ratio=0
expect_line strict.log "2 of 602 records rejected"

# Empty, or compressed with something else than gzip: named.
: >empty.json
expect_rc 1 empty.log "$SPARROW" "${TRAIN[@]}" --in file:empty.json
expect_line empty.log "file:empty.json: no record in the input (it is empty)"
printf '\xfd7zXZ\x00\x00\x04rest' >c.tsv.xz
expect_rc 1 xz.log "$SPARROW" "${TRAIN[@]}" --in file:c.tsv.xz
expect_line xz.log "the input is compressed with xz; only gzip is read as it is"

# ingest: the same verdict (its dead letters are still written).
expect_rc 1 ingest_wrong.log "$SPARROW" ingest --in file:j.json --out file:out.pb --format criteo
expect_line ingest_wrong.log "600 of 600 records rejected (100%, above ingest.max_reject_ratio=0.5)"
expect_line ingest_wrong.log "read as ingest.format=criteo but looks like JSON lines (json)"
[ "$(wc -l <out.pb.dlq)" -eq 600 ] || fail "ingest wrote $(wc -l <out.pb.dlq) dead letters, want 600"
expect_rc 0 ingest_auto.log "$SPARROW" ingest --in file:c.tsv.gz --out file:out2.pb
expect_line ingest_auto.log "ingest stopped events=600 examples=600 rejected=0 exit=0"

# A duration without a unit is refused before anything starts, naming the property and units.
expect_rc 2 bare.log "$SPARROW" "${TRAIN[@]}" --in file:c.tsv --set trainer.log.interval=5
expect_line bare.log "trainer.log.interval: '5' has no unit (write 5ms, 5s, 5m or 5h"
SPARROW_TRAINER_COMMIT_INTERVAL=30 expect_rc 2 bare_env.log "$SPARROW" "${TRAIN[@]}" --in file:c.tsv
expect_line bare_env.log "environment variable SPARROW_TRAINER_COMMIT_INTERVAL: trainer.commit.interval: '30' has no unit"

# A misspelt variable is warned about with the property meant; one of another command is not.
SPARROW_TRAINER_BACTH=64 SPARROW_PSERVER_DIM=9 expect_rc 0 env.log \
    "$SPARROW" "${TRAIN[@]}" --in file:c.tsv
expect_line env.log 'WARN trainer unknown environment variable ignored var=SPARROW_TRAINER_BACTH command=trainer hint="did you mean trainer.batch (SPARROW_TRAINER_BATCH)?"'
if grep -q "SPARROW_PSERVER_DIM" env.log; then fail "a pserver property was warned about"; fi
# A trainer and a shard that disagree on the dim fail at connect, naming both settings.
PP=$(free_port)
"$SPARROW" pserver --listen "tcp://127.0.0.1:$PP" --dim 16 --data-dir ps16 --http-port -1 \
    2>ps16.log &
PIDS+=("$!")
expect_rc 1 dim.log timeout 60 "$SPARROW" trainer --in file:c.tsv --shards "tcp://127.0.0.1:$PP" \
    --http-port -1
expect_line dim.log "trainer.model=fm needs dim 9 (trainer.latent_dim=8 + 1) but shard 0 (tcp://127.0.0.1:$PP) serves pserver.dim=16"
# pserver.dim=auto takes the first trainer's dim and keeps it for the next.
PA=$(free_port)
"$SPARROW" pserver --listen "tcp://127.0.0.1:$PA" --dim auto --data-dir psauto --http-port -1 \
    2>psauto.log &
PIDS+=("$!")
expect_rc 0 auto_fm.log timeout 60 "$SPARROW" trainer --in file:c.tsv --shards "tcp://127.0.0.1:$PA" \
    --http-port -1 --latent-dim 4
expect_line psauto.log "pserver dim taken from its first client dim=5"
expect_rc 1 auto_lr.log timeout 60 "$SPARROW" trainer --in file:c.tsv --shards "tcp://127.0.0.1:$PA" \
    --http-port -1 --model lr
expect_line auto_lr.log "trainer.model=lr needs dim 1 but shard 0 (tcp://127.0.0.1:$PA) serves pserver.dim=5"
echo PASS
