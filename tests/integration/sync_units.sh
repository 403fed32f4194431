#!/usr/bin/env bash
# The contracts of the two-phase modes' variants through real processes (the Kafka mock, one
# `sparrow pserver`, `sparrow coordinator`, Kafka `sparrow trainer`s; a straggler's steps take
# about 6x the others': trainer.debug.delay_ms 48 against 8). Each case runs until a checkpoint
# counts every example produced, then reads the coordinator's and the shard's /metrics, the coordinator's log (log.level=debug: one
# "step commit" line per commit with its unit, how many trainers it waited for and the unit's
# members) and the counter row (every example adds 1 to it) of that checkpoint.
#   backup-drop  sync, 3 trainers, coordinator.sync.backup=1, trainer 3 slowed 6x: every commit
#                waits for 2 or 3, some for 2; the shard drops late contributions (late or
#                discarded, none applied); the counter still counts every example.
#   backup-apply the same with coordinator.sync.late=apply: late contributions are applied
#                (late_applied), none discarded; the counter counts every example.
#   group        group:2, 4 trainers, trainer 4 slowed 6x: 2 groups of 2; every commit waits for
#                exactly its 2 members; the group without the straggler commits more steps.
#   group-speed  group:2 by speed, 4 trainers, trainers 2 and 4 slowed 6x: after a checkpoint
#                the two stragglers share a group (by index they would be apart).
#   elastic      sync, 4 trainers, coordinator.elastic.factor=2 (steps 3), trainer 4 slowed 6x:
#                it leaves the barrier; trainer 1, paused (SIGSTOP) for 1.5 s once trainer 4 left,
#                leaves and rejoins (at most half of a unit is out of the barrier at once).
# usage: sync_units.sh SPARROW DIR CKPT_COUNTER [CASE...]
set -euo pipefail
SPARROW=$1
DIR=$2
CKPT=$3
shift 3
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(backup-drop backup-apply group group-speed elastic)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster_lib.sh"
rm -rf "$DIR" && mkdir -p "$DIR"
KEY=9000000000000000077
N=8000

# metric PORT NAME [LABELS]: the sum of NAME{LABELS...} on the /metrics page at PORT.
metric() {
    python3 - "$@" <<'PY'
import sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
labels = sys.argv[3] if len(sys.argv) > 3 else ""
page = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10).read().decode()
total = 0.0
for line in page.split("\n"):
    if line.startswith("#") or not line.strip():
        continue
    key, value = line.rsplit(" ", 1)
    base = key.split("{", 1)[0]
    if base == name and labels in key:
        total += float(value)
print("%g" % total)
PY
}

http_port() {
    wait_for "$2's http port" 30 grep -q "http endpoint port=" "$1"
    grep -o "http endpoint port=[0-9]*" "$1" | head -1 | cut -d= -f2
}

# run_case NAME TRAINERS MODE "SLOW..." COORD_SETTINGS...: sets D, CO_HTTP, PS_HTTP; leaves the
# processes running (killed by the caller's stop_case).
run_case() {
    local name=$1 k=$2 mode=$3 slow=$4
    shift 4
    D="$DIR/$name"
    mkdir -p "$D"
    local DIR=$D i s # the cluster library's processes log under the case's directory
    FAIL_LOGS=("$D/*.log") # a failure shows this case's logs (its INFO lines and above)
    FAIL_TAIL=25
    start_broker examples:8
    CASE_PIDS=("$MOCK")
    start_shards 1 5 --set "pserver.checkpoint.dir=$D/ck" --set "pserver.debug.counter_key=$KEY"
    CASE_PIDS+=("${SHARD_PIDS[0]}")
    wait_for "$name: the pserver listening" 30 grep -q 'pserver listening' "$D/shard-0.log"
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    # the first recovery waits for every trainer: one recovery before any record is read
    start_coordinator "$mode" "$D/ck" --set coordinator.startup.grace=10s \
        --set "coordinator.startup.trainers=$k" \
        --set coordinator.checkpoint.interval=1500ms --set coordinator.http.port=0 \
        --set coordinator.member.timeout=20s --set log.level=debug "${sets[@]}"
    CASE_PIDS+=("$COORD")
    # the stream is a backlog (produced at once, before the trainers start), so that the steps
    # are as slow as their compute (a paced stream makes every trainer wait for data alike)
    "$SPARROW" gen --n "$N" --seed 5 --rate 1000000 --out "kafka://$BS/examples" 2>"$D/gen.log" ||
        fail "$name: gen"
    TRAINER_PIDS=()
    for i in $(seq 1 "$k"); do
        local delay=8
        for s in $slow; do [ "$s" = "$i" ] && delay=48; done
        "$SPARROW" trainer --in "kafka://$BS/examples" --shards "$SHARDS" \
            --model fm --latent-dim 4 --batch 64 --backend cpu --group g --id "$i" --http-port -1 \
            --set trainer.coordinator="tcp://127.0.0.1:$COORD_PORT" --set trainer.debug.delay_ms=$delay \
            --set "trainer.debug.counter_key=$KEY" \
            --set trainer.shutdown.grace=3s --set kafka.session.timeout.ms=6000 \
            --set kafka.heartbeat.interval.ms=500 >"$D/trainer-$i.log" 2>&1 &
        PIDS+=("$!")
        CASE_PIDS+=("$!")
        TRAINER_PIDS+=("$!")
    done
    wait_for "$name: the first recovery" 40 grep -q "recovery completed" "$D/coord.log"
    CO_HTTP=$(http_port "$D/coord.log" coordinator)
    PS_HTTP=$(http_port "$D/shard-0.log" pserver)
}

# Waits until a checkpoint counts every example; checks the counter row of LATEST.
drained() {
    wait_for "$name: a checkpoint of all $N examples" 120 grep -q "checkpoint completed epoch=[0-9]* examples=$N " "$D/coord.log"
    check_latest_counter "$CKPT" "$D/ck" "$KEY" "$N" "examples ($name)" >/dev/null
}

stop_case() {
    local p
    for p in "${CASE_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}

# all_assigned K: whether each of trainers 1..K holds Kafka partitions now (its log's
# assignments less its revocations).
all_assigned() {
    local i
    for i in $(seq 1 "$1"); do
        awk '/kafka partition assigned/ {n++} /kafka partitions revoked/ {
            sub(/.*count=/, ""); n -= $1} END {exit !(n > 0)}' "$D/trainer-$i.log" || return 1
    done
}

# since_recovery PATTERN: whether a line of the coordinator's log after its last "recovery
# completed" matches PATTERN.
since_recovery() {
    awk -v p="$1" '/recovery completed/ {seen = 0} $0 ~ p {seen = 1} END {exit !seen}' "$D/coord.log"
}

# line_after N PATTERN: prints the number of the first line of the coordinator's log after line N
# that matches PATTERN; status 1 when none does.
line_after() {
    awk -v n="$1" -v p="$2" 'NR > n && $0 ~ p {print NR; found = 1; exit} END {exit !found}' \
        "$D/coord.log"
}

# commits D: "unit waited members" per step commit line of the coordinator's log.
commits() {
    grep '"step commit"\| step commit ' "$D/coord.log" |
        sed -n 's/.*unit=\([0-9]*\) step=[0-9]* waited=\([0-9]*\) members=\([0-9]*\).*/\1 \2 \3/p'
}

for c in "${CASES[@]}"; do
    name=$c
    case $c in
    backup-drop | backup-apply)
        late=drop
        [ "$c" = backup-apply ] && late=apply
        run_case "$c" 3 sync "3" coordinator.sync.backup=1 coordinator.sync.late=$late
        drained
        commits >"$D/commits"
        read -r n two three other < <(awk '{n++; if ($2 == 2) a++; else if ($2 == 3) b++; else o++}
            END {print n, a + 0, b + 0, o + 0}' "$D/commits")
        echo "  $c: $n commits, $two waited for 2 of 3, $three for all 3, $other otherwise"
        check "$n > 0 and $other == 0 and $two > 0" "$c: every commit waits for 2 or 3 trainers, some for 2"
        lateps=$(metric "$PS_HTTP" sparrow_ps_step_pushes_total 'fate="late"')
        applied=$(metric "$PS_HTTP" sparrow_ps_step_pushes_total 'fate="late_applied"')
        disc=$(metric "$PS_HTTP" sparrow_ps_step_pushes_total 'fate="discarded"')
        clate=$(metric "$CO_HTTP" sparrow_coord_step_trainers_total 'fate="late"')
        echo "  $c: shard pushes late=$lateps late_applied=$applied discarded=$disc; coordinator late trainers=$clate"
        check "$clate > 0" "$c: the coordinator counts the trainers it did not wait for"
        if [ "$late" = drop ]; then
            check "$lateps + $disc > 0 and $applied == 0" "$c: late contributions dropped, none applied"
        else
            check "$applied > 0 and $disc == 0" "$c: late contributions applied, none discarded"
        fi
        ;;
    group)
        run_case "$c" 4 group:2 "4"
        drained
        commits >"$D/commits"
        grep -q "groups formed groups=2 size=2 trainers=4" "$D/coord.log" || fail "$c: not 2 groups of 2"
        slow_group=$(grep '"group member"\|group member ' "$D/coord.log" | grep "member=trainer-4 " |
            tail -1 | sed -n 's/.* group=\([0-9]*\).*/\1/p')
        read -r bad fast slow < <(awk -v s="$slow_group" '{if ($2 != 2 || $3 != 2) b++;
            if ($1 == s) sl++; else f++} END {print b + 0, f + 0, sl + 0}' "$D/commits")
        echo "  $c: straggler in group $slow_group; commits: other group $fast, straggler's group $slow; not waiting for exactly its 2 members: $bad"
        check "$bad == 0" "$c: every commit waits for exactly its group's 2 trainers"
        check "$fast > $slow > 0" "$c: the groups run asynchronously (the fast group commits more steps)"
        units=$(metric "$CO_HTTP" sparrow_coord_sync_units)
        check "$units == 2" "$c: sparrow_coord_sync_units is 2"
        ;;
    group-speed)
        run_case "$c" 4 group:2 "2 4" coordinator.group.by=speed
        drained
        # the last formation (after a checkpoint): the stragglers trainer-2 and trainer-4 together
        g2=$(grep 'group member' "$D/coord.log" | grep "member=trainer-2 " | tail -1 | sed -n 's/.* group=\([0-9]*\).*/\1/p')
        g4=$(grep 'group member' "$D/coord.log" | grep "member=trainer-4 " | tail -1 | sed -n 's/.* group=\([0-9]*\).*/\1/p')
        echo "  $c: trainer-2 in group $g2, trainer-4 in group $g4"
        [ -n "$g2" ] && [ "$g2" = "$g4" ] || fail "$c: the two stragglers are not grouped together"
        ;;
    elastic)
        N=24000 # long enough to pause trainer 1 while everyone still has data
        run_case "$c" 4 sync "4" coordinator.elastic.factor=2 coordinator.elastic.steps=3
        # training is steady once every trainer holds partitions (each rebalance of the Kafka
        # group while it forms starts a recovery, which puts everyone back in the barrier) and
        # the straggler left the barrier since the last recovery; trainer-1 is then paused until
        # it leaves too, again after a recovery that came between (at most 3 pauses)
        wait_for "$c: every trainer holding partitions" 90 all_assigned 4
        wait_for "$c: the straggler trainer-4 leaving the barrier" 60 since_recovery \
            'trainer leaves the barrier.*member=trainer-4 '
        left_at= # the coordinator's log line where trainer-1 left after a pause
        for pause in 1 2 3; do
            mark=$(wc -l <"$D/coord.log")
            kill -STOP "${TRAINER_PIDS[0]}"
            sleep 1.5
            kill -CONT "${TRAINER_PIDS[0]}"
            for _ in $(seq 1 100); do
                left_at=$(line_after "$mark" 'trainer leaves the barrier.*member=trainer-1 ') &&
                    break 2
                sleep 0.1
            done
            # no recovery since the pause: the check below fails
            line_after "$mark" 'recovery started' >/dev/null || break
            echo "  $c: a recovery came during pause $pause of trainer-1; pausing it again"
        done
        drained
        grep -q 'trainer leaves the barrier.*member=trainer-4 ' "$D/coord.log" ||
            fail "$c: the straggler trainer-4 did not leave the barrier"
        [ -n "$left_at" ] || fail "$c: trainer-1 (paused) did not leave the barrier"
        line_after "$left_at" 'trainer rejoins the barrier.*member=trainer-1 ' >/dev/null ||
            fail "$c: trainer-1 did not rejoin the barrier once it kept up"
        leaves=$(metric "$CO_HTTP" sparrow_coord_elastic_moves_total 'move="leave"')
        rejoins=$(metric "$CO_HTTP" sparrow_coord_elastic_moves_total 'move="rejoin"')
        echo "  $c: elastic moves leave=$leaves rejoin=$rejoins"
        check "$leaves >= 2 and $rejoins >= 1" "$c: the moves are counted"
        N=8000
        ;;
    *) fail "unknown case $c" ;;
    esac
    stop_case
done
echo "sync_units: ok (${CASES[*]})"
