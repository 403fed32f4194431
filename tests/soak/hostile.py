#!/usr/bin/env python3
"""tests/soak/hostile.py: hostile traffic at Sparrow's ports for the soak harness (issue 17).

For SECS seconds, at most RATE hostile actions per second (python3 stdlib only), each one of:
  ZeroMQ ports (--zmq HOST:PORT, repeatable): raw TCP garbage; a bad ZMTP greeting; a valid
    ZMTP 3.0 NULL greeting with a frame header announcing 2^62 bytes; a valid ZMTP 3.0 handshake
    (greeting, READY as a DEALER) followed by messages of random and mutated protobuf-like frames.
  HTTP ports (--http PORT, repeatable: serve and every role's /metrics): random bytes; a
    malformed request line; an oversized header; an oversized declared body; a random method and
    path; a slow request (half the headers, then held open until the end); a valid GET /metrics
    (must answer 200: counted as a failure otherwise).
Meanwhile a valid client (--predict PORT) sends POST /v1/predict every 20 ms and checks that each
answer is 200 with the same body as the first (serve's table does not change in the soak).
Prints one JSON line of counts; exit status 1 when a valid request failed or was wrong."""

import json
import os
import random
import socket
import struct
import sys
import threading
import time

PREDICT = b'{"examples": [{"keys": [1, 2, 3]}, {"keys": [42]}]}'
rnd = random.Random(int(os.environ.get("SOAK_SEED", "17")))
counts = {}
lock = threading.Lock()


def bump(key, n=1):
    with lock:
        counts[key] = counts.get(key, 0) + n


def conn(port, host="127.0.0.1"):
    s = socket.create_connection((host, port), timeout=2)
    s.settimeout(2)
    return s


def drain(s, limit=1 << 16):
    data = b""
    try:
        while len(data) < limit:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except OSError:
        pass
    return data


GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + \
    b"\x00" * 31


def zmtp_command(name, props):
    body = bytes([len(name)]) + name
    for k, v in props:
        body += bytes([len(k)]) + k + struct.pack(">I", len(v)) + v
    return (b"\x04" + bytes([len(body)]) if len(body) < 256 else
            b"\x06" + struct.pack(">Q", len(body))) + body


def zmtp_frame(data, more):
    flags = 0x01 if more else 0x00
    if len(data) < 256:
        return bytes([flags, len(data)]) + data
    return bytes([flags | 0x02]) + struct.pack(">Q", len(data)) + data


def pb_like():
    """Random bytes shaped like protobuf: tags, varints, length-delimited fields, mutated."""
    out = bytearray()
    for _ in range(rnd.randint(0, 12)):
        field, wt = rnd.randint(1, 20), rnd.choice([0, 1, 2, 5, 3, 7])
        out += bytes([(field << 3 | wt) & 0xff])
        if wt == 0:
            out += bytes(rnd.choice([[1], [0x80, 1], [0xff] * 10]))
        elif wt == 2:
            n = rnd.choice([0, 1, 5, 127, 300, 0x7fffffff])
            v = bytearray()
            while True:
                b = n & 0x7f
                n >>= 7
                v.append(b | (0x80 if n else 0))
                if not n:
                    break
            out += v + os.urandom(rnd.randint(0, 64))
        else:
            out += os.urandom(rnd.choice([4, 8]))
    if out and rnd.random() < 0.3:
        out[rnd.randrange(len(out))] ^= 1 << rnd.randrange(8)
    return bytes(out)


def zmq_action(host, port):
    kind = rnd.choice(["garbage", "bad_greeting", "huge_frame", "zmtp_random"])
    s = conn(port, host)
    try:
        if kind == "garbage":
            s.sendall(os.urandom(rnd.randint(1, 4096)))
        elif kind == "bad_greeting":
            g = bytearray(GREETING)
            g[rnd.choice([0, 9, 10, 12])] ^= 0x5a
            s.sendall(bytes(g) + os.urandom(32))
        elif kind == "huge_frame":
            s.sendall(GREETING)
            drain_some(s)
            s.sendall(zmtp_command(b"READY", [(b"Socket-Type", b"DEALER")]))
            s.sendall(b"\x02" + struct.pack(">Q", 1 << 62) + os.urandom(64))
        else:
            s.sendall(GREETING)
            drain_some(s)
            s.sendall(zmtp_command(b"READY", [(b"Socket-Type", b"DEALER"),
                                             (b"Identity", b"")]))
            for _ in range(rnd.randint(1, 5)):
                frames = [pb_like() for _ in range(rnd.randint(1, 4))]
                s.sendall(b"".join(zmtp_frame(f, i < len(frames) - 1)
                                   for i, f in enumerate(frames)))
            s.settimeout(0.2)
            drain(s, 4096)
    except OSError:
        pass
    finally:
        s.close()
    bump("zmq_" + kind)


def drain_some(s):
    s.settimeout(0.5)
    try:
        s.recv(64)
    except OSError:
        pass


SLOW = []


def http_action(port):
    kind = rnd.choice(["random", "bad_line", "huge_header", "huge_body", "random_path", "slow",
                       "valid_metrics", "bad_predict"])
    try:
        s = conn(port)
    except OSError:
        bump("http_connect_failed")
        return
    keep = False
    try:
        if kind == "random":
            s.sendall(os.urandom(rnd.randint(1, 2048)))
        elif kind == "bad_line":
            s.sendall(rnd.choice([b"GET\r\n\r\n", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
                                  b"\x00\x01 / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n",
                                  b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: -5"
                                  b"\r\n\r\n"]))
        elif kind == "huge_header":
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
        elif kind == "huge_body":
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"
                      + os.urandom(4096))
        elif kind == "random_path":
            m = rnd.choice([b"GET", b"POST", b"PUT", b"DELETE", b"BREW", b"OPTIONS"])
            path = b"/" + bytes(rnd.choice(b"abcv1/%.?&=") for _ in range(rnd.randint(0, 40)))
            body = pb_like()
            s.sendall(m + b" " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        elif kind == "bad_predict":  # valid HTTP, a mutated JSON body: the role's own checks
            body = bytearray(PREDICT)
            for _ in range(rnd.randint(1, 4)):
                body[rnd.randrange(len(body))] = rnd.choice(b'{}[]",:0x\\ ')
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + bytes(body))
        elif kind == "slow":
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Le")
            SLOW.append(s)
            keep = True
        else:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if not drain(s, 1 << 22).startswith(b"HTTP/1.1 200"):
                bump("valid_failed")
        if not keep and kind != "valid_metrics":
            s.settimeout(0.5)
            drain(s, 1 << 16)
    except OSError:
        pass
    finally:
        if not keep:
            s.close()
    bump("http_" + kind)


PREDICT_ = b'{"examples": [{"keys": [1, 2, 3]}, {"keys": [42]}]}'


def predict_loop(port, stop):
    first = None
    while not stop.is_set():
        try:
            s = conn(port)
            s.settimeout(10)
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nContent-Length: " +
                      str(len(PREDICT)).encode() + b"\r\n\r\n" + PREDICT)
            data = drain(s, 1 << 20)
            s.close()
            ok = data.startswith(b"HTTP/1.1 200")
            body = data.split(b"\r\n\r\n", 1)[-1]
            if ok and first is None:
                first = body
            if ok and body == first:
                bump("predict_ok")
            else:
                bump("predict_failed")
                sys.stderr.write("hostile: bad predict answer: %r\n" % data[:300])
        except OSError as e:
            bump("predict_failed")
            sys.stderr.write("hostile: predict: %s\n" % e)
        stop.wait(0.02)


def main():
    a = sys.argv[1:]
    secs, rate, zmq, http, predict = 20.0, 200.0, [], [], None
    while a:
        k = a.pop(0)
        v = a.pop(0)
        if k == "--secs":
            secs = float(v)
        elif k == "--rate":
            rate = float(v)
        elif k == "--zmq":
            h, p = v.rsplit(":", 1)
            zmq.append((h, int(p)))
        elif k == "--http":
            http.append(int(v))
        elif k == "--predict":
            predict = int(v)
        else:
            sys.exit(__doc__)
    stop = threading.Event()
    t = threading.Thread(target=predict_loop, args=(predict, stop)) if predict else None
    if t:
        t.start()
    targets = [("zmq", z) for z in zmq] + [("http", h) for h in http]
    end = time.monotonic() + secs
    next_t = time.monotonic()
    while time.monotonic() < end:
        kind, tgt = rnd.choice(targets)
        try:
            if kind == "zmq":
                zmq_action(*tgt)
            else:
                http_action(tgt)
        except OSError:
            bump(kind + "_connect_failed")
        if len(SLOW) > 200:  # bounded: the oldest slow ones are let go
            SLOW.pop(0).close()
        next_t += 1.0 / rate
        d = next_t - time.monotonic()
        if d > 0:
            time.sleep(d)
    stop.set()
    if t:
        t.join()
    for s in SLOW:
        s.close()
    print(json.dumps(counts, sort_keys=True))
    bad = counts.get("predict_failed", 0) + counts.get("valid_failed", 0)
    return 1 if bad or (predict and not counts.get("predict_ok")) else 0


if __name__ == "__main__":
    sys.exit(main())
