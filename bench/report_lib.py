"""Shared helpers of bench/run_all and the studies (bench/study_*.py): running commands with a
timeout while recording them, parsing the roles' key=value log lines, generating and splitting
the common stream, starting `sparrow pserver` shards and reading their /metrics. Standard library
only. Every figure the report prints comes from a command recorded here; nothing is estimated."""

import atexit
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import pbwire  # noqa: E402  (the varint reader the integration tests use)


_LIVE = []  # every process group started here, killed at exit if still running


def _track(p):
    _LIVE.append(p)
    return p


@atexit.register
def _kill_live():
    for p in _LIVE:
        if p.poll() is None and p.returncode is None:
            kill_group(p)


class Recorder:
    """Runs commands and keeps, for the report, each command line with its exit status and
    wall-clock seconds. Not thread-safe (the benchmarks run one at a time)."""

    def __init__(self, log=None):
        self.commands = []
        self.log = log  # callable(str) for progress lines, or None

    def note(self, msg):
        if self.log:
            self.log(msg)

    def record(self, argv, rc, secs, what=""):
        line = argv if isinstance(argv, str) else " ".join(shlex.quote(str(a)) for a in argv)
        self.commands.append({"cmd": line, "rc": rc, "secs": round(secs, 2), "what": what})

    def run(self, argv, timeout, out_path=None, what="", env=None, cwd=None):
        """Runs argv to the end (killed with its process group after timeout seconds); stdout and
        stderr go to out_path (or are captured). Returns (rc, text, secs); rc is None on timeout."""
        t0 = time.monotonic()
        fh = open(out_path, "w") if out_path else subprocess.PIPE
        out, started = "", False
        try:
            p = _track(subprocess.Popen([str(a) for a in argv], stdout=fh,
                                        stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                        start_new_session=True, text=True))
            started = True
            try:
                out, _ = p.communicate(timeout=timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                kill_group(p)
                out, _ = p.communicate()
                rc = None
        except OSError as e:  # not executable, not found: a failed run, not a crash of run_all
            rc, out = 127, "cannot run %s: %s\n" % (argv[0], e)
            if out_path:
                fh.write(out)
        finally:
            if out_path:
                fh.close()
        secs = time.monotonic() - t0
        if out_path and started:
            with open(out_path, errors="replace") as f:
                out = f.read()
        self.record(argv, rc, secs, what)
        return rc, out or "", secs


def kill_group(p, sig=signal.SIGKILL):
    """Signals the process group a Recorder or start_* started (start_new_session=True)."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def kv(line, key):
    """The value of ` key=value` in a log line (quotes stripped), or None."""
    m = re.search(r"(?:^|\s)" + re.escape(key) + r"=(\"[^\"]*\"|\S+)", line)
    return m.group(1).strip('"') if m else None


def kv_all(line):
    """Every key=value of a log line as a dict of strings."""
    return {m.group(1): m.group(2).strip('"')
            for m in re.finditer(r"(?:^|\s)([A-Za-z_][\w.]*)=(\"[^\"]*\"|\S+)", line)}


def finished(text):
    """The key=values of the last trainer ' finished ' line of a log, or None."""
    lines = [ln for ln in text.splitlines() if " finished " in ln and "examples=" in ln]
    return kv_all(lines[-1]) if lines else None


def num(s, default=None):
    try:
        return float(str(s).replace(",", ""))
    except (TypeError, ValueError):
        return default


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- the common stream -------------------------------------------------------------------------

# The stream every study trains on: 39 fields, drift, fixed seed. A smaller vocabulary than the
# generator's default so that the studies' runs (at most a million examples) learn enough for
# the differences between variants to show.
STREAM = {"seed": 7, "fields": 39, "drift": 0.5, "vocab_max": 100000}


def gen_stream(rec, sparrow, path, n, log_path):
    """Generates the studies' stream; returns the generator's summary key=values."""
    argv = [sparrow, "gen", "--n", n, "--seed", STREAM["seed"], "--fields", STREAM["fields"],
            "--set", "gen.drift=%s" % STREAM["drift"],
            "--set", "gen.vocab.max=%d" % STREAM["vocab_max"], "--out", path]
    rc, out, _ = rec.run(argv, 300, log_path, what="the studies' stream")
    if rc != 0:
        raise RuntimeError("sparrow gen failed (rc=%s): %s" % (rc, out[-500:]))
    done = [ln for ln in out.splitlines() if " gen done " in ln]
    return kv_all(done[-1]) if done else {}


def split_pb(path, k, block, prefix):
    """Deals the length-delimited examples of path to k files, block examples at a time in turn,
    so that every part spans the whole stream (as Kafka partitions do). Returns the paths."""
    outs = ["%s.%d" % (prefix, i) for i in range(k)]
    fs = [open(o, "wb") for o in outs]
    with open(path, "rb") as f:
        data = f.read()
    i = n = 0
    try:
        while i < len(data):
            ln, j = pbwire.varint(data, i)
            fs[(n // block) % k].write(data[i:j + ln])
            i = j + ln
            n += 1
    finally:
        for f in fs:
            f.close()
    return outs


# ---- shards ------------------------------------------------------------------------------------

class Pserver:
    """One `sparrow pserver` process on loopback with its own data directory."""

    def __init__(self, rec, sparrow, data_dir, dim, settings=(), memory_mb=1024, log_path=None):
        self.port = free_port()
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.log_path = log_path or os.path.join(data_dir + ".log")
        argv = [sparrow, "pserver", "--listen", self.endpoint, "--dim", dim, "--data-dir",
                data_dir, "--http-port", "0", "--memory-mb", memory_mb]
        for s in settings:
            argv += ["--set", s]
        self.argv = argv
        self.t0 = time.monotonic()
        self.rec = rec
        self.fh = open(self.log_path, "w")
        self.p = _track(subprocess.Popen([str(a) for a in argv], stdout=self.fh,
                                         stderr=subprocess.STDOUT, start_new_session=True))
        self.http = None
        text = ""
        for _ in range(600):
            time.sleep(0.05)
            with open(self.log_path, errors="replace") as f:
                text = f.read()
            m = re.search(r"http endpoint port=(\d+)", text)
            if m:
                self.http = int(m.group(1))
            if self.http and "pserver listening" in text:
                break
            if self.p.poll() is not None:
                break
        if not self.http or self.p.poll() is not None:
            self.stop()
            raise RuntimeError("sparrow pserver did not start: %s" % text[-500:])

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.http, timeout=10) as r:
            return r.read().decode()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                kill_group(self.p)
                self.p.wait()
        self.fh.close()
        self.rec.record(self.argv, self.p.returncode, time.monotonic() - self.t0, "shard")


def histogram(text, name):
    """Cumulative buckets [(upper bound, count)] (+Inf as inf), sum and count of a Prometheus
    histogram in a /metrics text (summed over label sets)."""
    buckets, total, count = {}, 0.0, 0.0
    for ln in text.splitlines():
        if ln.startswith(name + "_bucket"):
            m = re.search(r'le="([^"]+)"\}\s+(\S+)', ln)
            if m:
                le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
                buckets[le] = buckets.get(le, 0.0) + float(m.group(2))
        elif ln.startswith(name + "_sum"):
            total += float(ln.split()[-1])
        elif ln.startswith(name + "_count"):
            count += float(ln.split()[-1])
    return sorted(buckets.items()), total, count


def hist_quantile(buckets, q):
    """Upper bound of the bucket holding quantile q (what a histogram can say, no more)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    want = q * buckets[-1][1]
    for le, c in buckets:
        if c >= want:
            return le
    return buckets[-1][0]


def spawn(argv, log_path):
    """Starts argv in its own process group with output to log_path; returns the Popen."""
    fh = open(log_path, "w")
    p = _track(subprocess.Popen([str(a) for a in argv], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True))
    fh.close()
    return p


def wait_rusage(p, timeout):
    """Waits for p (killing it after timeout seconds) with wait4, so that the resource usage is
    this child's own; returns (rc or None on timeout, max RSS in KiB)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            rc = os.waitstatus_to_exitcode(status)
            p.returncode = rc
            return rc, ru.ru_maxrss
        if time.monotonic() > deadline:
            kill_group(p)
            pid, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            return None, ru.ru_maxrss
        time.sleep(0.02)


def trainer_argv(sparrow, data, shards, model="fm", k=8, batch=512, window=50000, extra=()):
    argv = [sparrow, "trainer", "--in", "file:" + data, "--shards", shards, "--model", model,
            "--latent-dim", k, "--batch", batch, "--backend", "cpu", "--http-port", "-1",
            "--set", "trainer.log.interval=0", "--set", "trainer.eval.window=%s" % window]
    for s in extra:
        argv += ["--set", s]
    return argv


def launch_failure(out, rc, summary, drained, duration, otherwise):
    """Why a `sparrow launch` run of a study failed, with its exit status: what launch said after
    FAILED:, else the first of: the study's own timeout (rc None), no summary.json, not drained
    within --duration, `otherwise`."""
    said = [ln.split("FAILED:", 1)[1].split("; logs under")[0].strip()
            for ln in out.splitlines() if ln.startswith("sparrow launch: FAILED:")]
    why = ("timeout of the study's wrapper" if rc is None else
           said[0] if said else
           "no summary.json" if not summary else
           "not drained within --duration %ss" % duration if not drained else
           otherwise)
    return "%s (rc=%s)" % (why, rc)
