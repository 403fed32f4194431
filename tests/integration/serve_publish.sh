#!/usr/bin/env bash
# The shard's update stream end to end: `sparrow pserver` publishing to `sparrow kafka-mock`,
# trained by pserver_client, tailed by `sparrow serve`: once pushes stop, serve's rows equal the
# shard's (1e-6), a CheckpointReply carries the stream's offsets, and TTL evictions become
# tombstones that remove the keys from serve.
set -euo pipefail
SPARROW=$1
DIR=$2
CLIENT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$DIR" && mkdir -p "$DIR"
cd "$DIR"
exec python3 - "$SPARROW" "$CLIENT" "$HERE" <<'PY'
import json, os, random, socket, struct, subprocess, sys, time, urllib.request

SPARROW, CLIENT = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from cluster import PROCS, cleanup, fail, free_port, http, start_mock, wait_file
DIM = 4
NKEYS = 300
TTL_S = 12


def client(*args, check=True):
    r = subprocess.run([CLIENT, EP, str(DIM), *map(str, args)], capture_output=True, timeout=60)
    if check and r.returncode:
        fail("pserver_client %r: %d %s %s" % (args, r.returncode, r.stdout, r.stderr))
    return r


def shard_rows():
    """Every key 0..NKEYS-1 with a row (version > 0): key -> weights, pulled from the shard."""
    client("dump", NKEYS, "dump.bin")
    data = open("dump.bin", "rb").read()
    rows, off = {}, 0
    for base in range(0, NKEYS, 256):
        n = min(256, NKEYS - base)
        vals = struct.unpack("<%df" % (n * DIM), data[off:off + n * DIM * 4])
        off += n * DIM * 4
        vers = struct.unpack("<%dI" % n, data[off:off + n * 4])
        off += n * 4
        for i in range(n):
            if vers[i] > 0:
                rows[base + i] = list(vals[i * DIM:(i + 1) * DIM])
    return rows


try:
    mock, BS = start_mock(SPARROW, "model-updates:3")

    EP = "tcp://127.0.0.1:%d" % free_port()
    ps = subprocess.Popen([SPARROW, "pserver", "--listen", EP,
                           "--set", "pserver.dim=%d" % DIM, "--set", "pserver.data_dir=ps",
                           "--set", "pserver.http.port=0", "--set", "pserver.ttl=%ds" % TTL_S,
                           "--set", "pserver.publish.interval=300ms",
                           "--set", "kafka.bootstrap.servers=" + BS],
                          stdout=subprocess.DEVNULL, stderr=open("pserver.err", "w"))
    PROCS.append(ps)
    end = time.time() + 30
    while client("health", check=False).returncode != 0:
        if ps.poll() is not None or time.time() > end:
            fail("pserver did not start")
        time.sleep(0.1)

    serve = subprocess.Popen([SPARROW, "serve", "--brokers", BS, "--port", "0",
                              "--port-file", "serve.port", "--set", "serve.log.dir=" + os.getcwd()],
                             stdout=subprocess.DEVNULL, stderr=open("serve.err", "w"))
    PROCS.append(serve)
    PORT = int(wait_file("serve.port", 30))

    # Two trainers' worth of pushes on a third of the keys each (some keys never touched).
    client("train", 1, 20, NKEYS * 2 // 3, 1)
    client("train", 2, 20, NKEYS * 2 // 3, 2)
    t_stop = time.time()
    rows = shard_rows()
    if len(rows) < 50:
        fail("too few trained rows: %d" % len(rows))

    # A checkpoint publishes and reports the stream's high-water offsets.
    r = client("checkpoint", 1)
    if not r.stdout.startswith(b"ok"):
        fail("checkpoint: %r" % r.stdout)

    rng = random.Random(5)
    sample = rng.sample(sorted(rows), 40)
    untouched = [k for k in range(NKEYS) if k not in rows][:10]
    last = None
    end = time.time() + 60
    while time.time() < end:
        bad = None
        for k in sample:
            st, text = http(PORT, "GET", "/v1/rows/%d" % k)
            if st != 200:
                bad = "row %d: %d %s" % (k, st, text)
                break
            w = json.loads(text)["weights"]
            if len(w) != DIM or any(abs(a - b) > 1e-6 for a, b in zip(w, rows[k])):
                bad = "row %d: serve %r != shard %r" % (k, w, rows[k])
                break
        if bad is None:
            break
        last = bad
        time.sleep(0.3)
    else:
        fail("serve did not converge to the shard: " + str(last))
    for k in untouched:
        st, _ = http(PORT, "GET", "/v1/rows/%d" % k)
        if st != 404:
            fail("untrained key %d visible in serve: %d" % (k, st))
    converged_s = time.time() - t_stop
    if converged_s > TTL_S - 2:
        fail("converged only after %.1fs, too close to the TTL" % converged_s)

    # TTL: nothing is pushed any more, so every row expires and is tombstoned.
    end = time.time() + TTL_S + 60
    while time.time() < end:
        left = [k for k in sample if http(PORT, "GET", "/v1/rows/%d" % k)[0] != 404]
        if not left:
            break
        time.sleep(0.5)
    else:
        fail("evicted keys still in serve: %r" % left[:5])
    if shard_rows():
        fail("shard still holds rows after the TTL")

    # Metrics: rows and tombstones delivered, no failures.
    import re
    m = re.search(r"http endpoint port=(\d+)", open("pserver.err").read())
    if not m:
        fail("no pserver http port in its log")
    # (the publisher's counters reach /metrics on the shard's next stats sync: wait for them)
    def metric(page, name, labels=""):
        for line in page.splitlines():
            if line.startswith(name + labels + " ") or line.startswith(name + labels + "{"):
                return float(line.split()[-1])
        return None
    end = time.time() + 30
    while True:
        st, page = http(int(m.group(1)), "GET", "/metrics")
        published = metric(page, "sparrow_ps_published_total", '{kind="row"}')
        tombs = metric(page, "sparrow_ps_published_total", '{kind="tombstone"}')
        failures = metric(page, "sparrow_ps_publish_failures_total")
        ok = (published is not None and published >= len(rows) and tombs is not None and
              tombs >= len(rows) and failures == 0)
        if ok or time.time() > end:
            break
        time.sleep(0.5)
    if not ok:
        fail("metrics: published %r (rows %d), tombstones %r, failures %r" %
             (published, len(rows), tombs, failures))

    # SIGTERM: a final publish and flush, clean exit.
    ps.terminate()
    if ps.wait(timeout=60) != 0:
        fail("pserver exit status %d" % ps.returncode)
    log = open("pserver.err").read()
    for needle in ("publishing model updates", "checkpoint update offsets", "update publisher stopped"):
        if needle not in log:
            fail("pserver log lacks %r" % needle)
    print("ok: %d sampled rows matched in %.1fs; published %d rows, %d tombstones" %
          (len(sample), converged_s, published, tombs))
finally:
    cleanup()
PY
