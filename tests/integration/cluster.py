"""The cluster library of the Python integration scripts (cluster_lib.sh's counterpart; imported,
not a test itself): processes killed on exit, fail with the logs' tails, free ports, polls and
HTTP. Scripts run in their log directory: fail prints the tail of every *.err and *.log there."""
import atexit
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROCS = []  # every process a script starts: killed on exit
QUIET = [False]  # set while a failure is only a retry: fail raises SystemExit without printing


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.kill()


atexit.register(cleanup)


def fail(msg):
    if QUIET[0]:
        raise SystemExit(1)
    print("FAIL:", msg)
    for name in sorted(os.listdir(".")):
        if name.endswith((".err", ".log")):
            print("---", name)
            print(open(name, errors="replace").read()[-3000:])
    sys.exit(1)


def spawn(args, name, **kw):
    """Starts args with stdout to NAME.out and stderr to NAME.err (unless given); kept in PROCS."""
    kw.setdefault("stdout", open(name + ".out", "w"))
    kw.setdefault("stderr", open(name + ".err", "w"))
    p = subprocess.Popen(args, **kw)
    PROCS.append(p)
    return p


def wait_file(path, t):
    """The stripped content of path once it exists and is not empty; fails after t seconds."""
    end = time.time() + t
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        time.sleep(0.1)
    fail("no " + path)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_mock(sparrow, *topics):
    """`sparrow kafka-mock` with the topics (NAME:PARTITIONS), its stdin a pipe; returns the
    process and the bootstrap address."""
    args = [sparrow, "kafka-mock", "--port-file", "bs"]
    for t in topics:
        args += ["--topic", t]
    mock = spawn(args, "mock", stdin=subprocess.PIPE)
    return mock, wait_file("bs", 20)


def http(port, method, path, body=None, headers=None, timeout=20):
    """(status, body text) of one request to 127.0.0.1:port; an HTTP error status is returned."""
    if isinstance(body, str):
        body = body.encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
