#!/usr/bin/env bash
# Shared by the ingest_*.sh integration tests (sourced, not a test itself): the cluster library,
# the Kafka settings every test ingest uses, and ExampleBatch records decoded with a small protobuf
# reader (no Python protobuf package is needed).
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=(mock.err "ingest*.err")
command -v kcat >/dev/null || { echo "kcat not installed"; exit 1; }

# Settings every test ingest uses: a short session timeout so the mock rebalances quickly after
# a member dies, and quick metadata refresh after a broker comes back.
KAFKA_TEST_SETS=(--set kafka.session.timeout.ms=6000 --set kafka.heartbeat.interval.ms=500
    --set kafka.topic.metadata.refresh.interval.ms=1000 --set ingest.http.port=-1)

# ingest_produced PORT: the records an ingest listening on PORT (ingest.http.port) has delivered,
# from its /metrics. A local scrape answers at once, where reading a topic back with kcat can take
# longer than a test's whole stream on a loaded or slowed broker.
ingest_produced() {
    curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
        awk '/^sparrow_kafka_produced_total/ { n += $NF } END { print n + 0 }'
}

# dump_examples TOPIC OUT: one line per example: partition id label n_features field:key,...
dump_examples() {
    timeout 60 kcat -C -b "$BS" -t "$1" -e -q -f '%p\n%R%s' >"$2.raw" || return 1
    python3 - "$2.raw" >"$2" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1
        r |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return r, i
def fields(b):
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        f, w = tag >> 3, tag & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise ValueError("wire type %d" % w)
        yield f, w, v
i = 0
while i < len(data):
    nl = data.index(b"\n", i)
    part = int(data[i:nl]); i = nl + 1
    (n,) = struct.unpack(">i", data[i:i + 4]); i += 4
    rec = data[i:i + n]; i += n
    for f, w, ex in fields(rec):
        if f != 1:
            continue
        eid, label, flds, keys = -1, None, [], []
        for g, w2, v in fields(ex):
            if g == 1: eid = v
            elif g == 2: label = struct.unpack("<f", v)[0]
            elif g == 4:
                if w2 == 2:
                    j = 0
                    while j < len(v):
                        x, j = varint(v, j); flds.append(x)
                else: flds.append(v)
            elif g == 5:
                keys += [struct.unpack("<Q", v[k:k + 8])[0] for k in range(0, len(v), 8)] if w2 == 2 else [struct.unpack("<Q", v)[0]]
        print(part, eid, label, len(flds), ",".join("%d:%d" % fk for fk in zip(flds, keys)))
PY
}

# wait_all_examples N: polls the examples topic (dump_examples into ex.txt, 90 s at most) until
# it holds N distinct event ids; sets N_UNIQ (distinct ids) and N_EX (examples, duplicates too).
wait_all_examples() {
    local _
    for _ in $(seq 1 90); do
        dump_examples examples ex.txt || true
        [ "$(awk '{print $2}' ex.txt | sort -u | wc -l)" -ge "$1" ] && break
        sleep 1
    done
    N_UNIQ=$(awk '{print $2}' ex.txt | sort -u | wc -l)
    N_EX=$(wc -l <ex.txt)
}
