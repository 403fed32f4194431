#!/usr/bin/env bash
# `sparrow serve` end to end against `sparrow kafka-mock`: bootstrap from a checkpoint honouring
# its update offsets, predictions equal to a direct FM computation (1e-6), tombstones, a replica
# started late and one restarted mid-stream converging to the same state, and hostile HTTP
# requests refused while concurrent valid ones are answered correctly.
set -euo pipefail
SPARROW=$1
DIR=$2
DRIVER=$3
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$DIR" && mkdir -p "$DIR"
cd "$DIR"
exec python3 - "$SPARROW" "$DRIVER" "$HERE" <<'PY'
import json, math, os, random, signal, socket, subprocess, sys, threading, time, urllib.request

SPARROW, DRIVER = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from cluster import PROCS, QUIET, cleanup, fail, http, start_mock, wait_file
try:
    mock, BS = start_mock(SPARROW, "model-updates:3")
    rng = random.Random(7)
    DIM = 3  # FM with k = 2
    KEYS = [0] + [rng.getrandbits(64) for _ in range(40)]
    state = {}  # key -> (weights, version)

    def produce(lines):
        r = subprocess.run([DRIVER, "produce", BS, "model-updates"], input="".join(lines).encode(),
                           stderr=open("driver.err", "a"), timeout=60)
        if r.returncode:
            fail("produce")

    def put_lines(keys, version, epoch):
        out = []
        for k in keys:
            w = [round(rng.uniform(-0.5, 0.5), 6) for _ in range(DIM)]
            state[k] = (w, version)
            out.append("put %d %d %d %d %s\n" % (k, version, epoch, int(time.time() * 1000) - 500,
                                                " ".join(repr(x) for x in w)))
        return out

    def watermarks():
        r = subprocess.run(["kcat", "-C", "-b", BS, "-t", "model-updates", "-e", "-q", "-f", "%p\n"],
                           capture_output=True, timeout=30)
        counts = {0: 0, 1: 0, 2: 0}
        for line in r.stdout.decode().split():
            counts[int(line)] += 1
        return counts

    # Phase 0: an update that the checkpoint already covers (must not be replayed: offsets).
    POISON = 12345
    produce(["put %d 1 1 0 9 9 9\n" % POISON])
    wm = watermarks()
    # The checkpoint (epoch 3) holds half the keys; the stream then updates a third of them.
    ck_keys = KEYS[::2]
    ck_lines = []
    for k in ck_keys:
        w = [round(rng.uniform(-0.5, 0.5), 6) for _ in range(DIM)]
        state[k] = (w, 1)
        ck_lines.append("%d %s\n" % (k, " ".join(repr(x) for x in w)))
    os.makedirs("ck")
    offs = ",".join("%d:%d" % (p, o) for p, o in wm.items())
    r = subprocess.run([DRIVER, "checkpoint", "ck", "3", str(DIM), "model-updates", offs],
                       input="".join(ck_lines).encode(), stderr=open("driver.err", "a"), timeout=60)
    if r.returncode:
        fail("checkpoint")
    produce(put_lines(KEYS[::3], 2, 4))

    def start(name, extra=()):
        if os.path.exists(name + ".port"):
            os.unlink(name + ".port")
        p = subprocess.Popen([SPARROW, "serve", "--checkpoint-dir", "ck", "--brokers", BS,
                              "--port", "0", "--port-file", name + ".port",
                              "--set", "serve.log.dir=" + os.getcwd(),
                              "--set", "serve.max_body=65536",
                              "--set", "serve.max_features=64", *extra],
                             stdout=subprocess.DEVNULL, stderr=open(name + ".err", "a"))
        PROCS.append(p)
        port = int(wait_file(name + ".port", 30))
        return p, port

    def wait_ready(port):
        end = time.time() + 60
        while time.time() < end:
            if http(port, "GET", "/readyz")[0] == 200:
                return
            time.sleep(0.2)
        fail("not ready on %d" % port)

    def expected(keys, weights):
        z = 0.0
        bias = state.get(0, ([0.0] * DIM, 0))[0]
        z = bias[0]
        s = [0.0] * (DIM - 1); q = [0.0] * (DIM - 1)
        for k, x in zip(keys, weights):
            w = state.get(k, ([0.0] * DIM, 0))[0]
            z += w[0] * x
            for f in range(DIM - 1):
                s[f] += w[1 + f] * x; q[f] += (w[1 + f] * x) ** 2
        z += 0.5 * sum(s[f] * s[f] - q[f] for f in range(DIM - 1))
        return 1.0 / (1.0 + math.exp(-z))

    examples = []
    for i in range(20):
        ks = rng.sample(KEYS[1:] + [777, 888], 6)
        ws = [rng.choice([1.0, 0.5, 2.0]) for _ in ks]
        examples.append((ks, ws))

    def check_state(port, label):
        body = json.dumps({"examples": [{"keys": [str(k) for k in ks], "weights": ws}
                                        for ks, ws in examples]})
        st, text = http(port, "POST", "/v1/predict", body)
        if st != 200:
            fail("%s: predict %d %s" % (label, st, text))
        got = json.loads(text)
        for (ks, ws), p in zip(examples, got["predictions"]):
            if abs(p - expected(ks, ws)) > 1e-6:
                fail("%s: prediction %r != %r" % (label, p, expected(ks, ws)))
        for k in KEYS + [POISON]:
            st, text = http(port, "GET", "/v1/rows/%d" % k)
            if k in state:
                if st != 200:
                    fail("%s: row %d: %d %s" % (label, k, st, text))
                row = json.loads(text)
                if any(abs(a - b) > 1e-6 for a, b in zip(row["weights"], state[k][0])):
                    fail("%s: row %d %r != %r" % (label, k, row["weights"], state[k][0]))
            elif st != 404:
                fail("%s: row %d should be absent, got %d %s" % (label, k, st, text))
        return got

    def converge(port, label):
        end = time.time() + 60
        while time.time() < end:
            QUIET[0] = True
            try:
                return check_state(port, label)
            except SystemExit:
                time.sleep(0.5)
            finally:
                QUIET[0] = False
        return check_state(port, label)

    a, pa = start("a")
    wait_ready(pa)
    got = check_state(pa, "bootstrap")  # ready means caught up: no waiting
    if got["epoch"] != 4 or sum(got["update_offsets"].values()) != sum(wm.values()) + len(KEYS[::3]):
        fail("epoch/offsets %r (watermarks %r)" % (got, wm))
    print("bootstrap + tail: ok", got["update_offsets"])

    # Phase 2: tombstones and new values while A runs.
    dead = KEYS[1:40:4]
    lines = ["del %d 5\n" % k for k in dead]
    for k in dead:
        state.pop(k, None)
    lines += put_lines(KEYS[5:15], 3, 5)
    for k in dead:
        state.pop(k, None)  # a later put of the same key would revive it; keep the order clear
    produce([l for l in lines if not (l.startswith("put") and int(l.split()[1]) in dead)])
    converge(pa, "tombstones")
    print("tombstones: ok")

    # A replica started late converges to the same state.
    b, pb = start("b")
    wait_ready(pb)
    check_state(pb, "late replica")
    print("late replica: ok")

    # A replica with a bearer token: /v1/* refused without it, served with it; probes stay open.
    with open("token", "w") as f:
        f.write("t0ken-%d\n" % rng.getrandbits(32))
    token = open("token").read().strip()
    c, pc = start("c", ("--set", "serve.auth.token_file=" + os.path.join(os.getcwd(), "token")))
    wait_ready(pc)
    path = "/v1/rows/%d" % KEYS[3]
    if http(pc, "GET", path)[0] != 401:
        fail("no token: not 401")
    if http(pc, "GET", path, headers={"Authorization": "Bearer wrong"})[0] != 401:
        fail("wrong token: not 401")
    if http(pc, "GET", path, headers={"Authorization": "Bearer " + token}) != http(pb, "GET", path):
        fail("token: answer differs from an open replica's")
    if http(pc, "GET", "/healthz")[0] != 200:
        fail("healthz behind the token")
    c.send_signal(signal.SIGTERM)
    if c.wait(timeout=30) != 0:
        fail("token replica did not exit 0")
    print("bearer token: ok")

    # A restarted mid-stream: stop it, produce more, start it again.
    a.send_signal(signal.SIGTERM)
    if a.wait(timeout=30) != 0:
        fail("serve did not exit 0 on SIGTERM")
    produce(put_lines(KEYS[20:30], 4, 6) + ["del %d 6\n" % KEYS[21]])
    state.pop(KEYS[21], None)
    a, pa = start("a")
    wait_ready(pa)
    converge(pa, "restarted replica")
    converge(pb, "running replica")
    print("restart: ok")

    # Hostile requests while valid ones run concurrently.
    stop = threading.Event(); errors = []
    def valid_loop():
        while not stop.is_set():
            try:
                check_state(pb, "concurrent")
            except SystemExit:
                errors.append("wrong answer under load")
                return
    t = threading.Thread(target=valid_loop); t.start()
    # slow clients: half a request line, then silence
    slow = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", pb)); s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"ke")
        slow.append(s)
    bad = [
        ("POST", "/v1/predict", "{\"keys\":[1,", 400),
        ("POST", "/v1/predict", "{\"keys\":[1],\"admin\":true}", 400),
        ("POST", "/v1/predict", json.dumps({"keys": list(range(65))}), 400),
        ("POST", "/v1/predict", "x" * 70000, 413),
        ("POST", "/v1/predict", "", 400),
        ("POST", "/v1/predict", "{\"examples\":[" + ",".join(["{\"keys\":[1]}"] * 2000) + "]}", 400),
        ("POST", "/v1/predict", "\xff\xfe{}", 400),
        ("GET", "/v1/predict", None, 405),
        ("GET", "/v1/rows/abc", None, 400),
        ("GET", "/v1/rows/99999999999999999999999", None, 400),
        ("GET", "/v1/rows/", None, 400),
        ("POST", "/v1/rows/1", "{}", 405),
        ("GET", "/v1/nothing", None, 404),
    ]
    for method, path, body, want in bad:
        st, text = http(pb, method, path, body)
        if st != want:
            fail("%s %s: %d (wanted %d) %s" % (method, path, st, want, text))
        if want == 400 and "error" not in json.loads(text):
            fail("no error message: " + text)
    rnd = random.Random(3)
    for i in range(200):  # random bytes and mutated JSON
        base = bytearray(json.dumps({"examples": [{"keys": [1, 2], "weights": [1, 2]}]}).encode())
        for _ in range(rnd.randint(1, 4)):
            base[rnd.randrange(len(base))] = rnd.randrange(256)
        st, _ = http(pb, "POST", "/v1/predict", bytes(base))
        if st not in (200, 400):
            fail("mutated body got %d" % st)
    time.sleep(1)
    stop.set(); t.join(timeout=60)
    for s in slow:
        s.close()
    if errors:
        fail(errors[0])
    st, text = http(pb, "GET", "/metrics")
    for name in ["sparrow_serve_freshness_seconds_bucket{stage=\"event_to_visible\"",
                 "sparrow_serve_bad_requests_total", "sparrow_serve_updates_total{kind=\"tombstone\"}"]:
        if name not in text:
            fail("metrics lack " + name)
    if http(pb, "GET", "/healthz")[0] != 200:
        fail("healthz")
    check_state(pb, "after hostile")
    print("hostile: ok")
    for p in (a, b):
        p.send_signal(signal.SIGTERM)
        if p.wait(timeout=30) != 0:
            fail("exit status")
    print("PASS")
finally:
    cleanup()
PY
