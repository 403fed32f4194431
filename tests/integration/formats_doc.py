#!/usr/bin/env python3
"""The tested examples of docs/FORMATS.md: fenced blocks whose info string names their role.

  ```json event                      one accepted JSON event per line
  ```json event-rejected REASON [k=v]...   one event per line, each refused with REASON (ingest
                                     run with --set k=v for each setting)
  ```tsv dead-letter                 a dead-letter line of the events above, in one file
  ```sh criteo                       writes a Criteo file that ingest must accept whole
  ```sh curl STATUS                  one curl command against serve at localhost:8080 ...
  ```json response                   ... and its answer: the shape (STATUS 200) or the exact body

usage: formats_doc.py extract FORMATS.md OUTDIR
       formats_doc.py compare EXPECTED_FILE ACTUAL_FILE STATUS
extract writes into OUTDIR: events.json and events.expect (the event and event-rejected blocks
without settings, in order; "ok" or the reason per line), rejected-N.json/.reason/.set (blocks
with settings), dead-letter.tsv, criteo.sh, curl-N.sh/.status/.response; it prints a summary.
compare exits 1 unless ACTUAL matches EXPECTED: for 200 the same JSON shape (objects with the same
members, except maps with decimal keys, whose values only must match in kind; arrays of the same
length; numbers, strings, bools in the same places), else the same JSON exactly.
"""
import json
import os
import re
import sys

FENCE = re.compile(r"^```(\S*)(.*)$")


def blocks(path):
    """(info words, text, line number) of every fenced block."""
    out, cur = [], None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        m = FENCE.match(line)
        if cur is None and m:
            cur = ([m.group(1)] + m.group(2).split(), [], n)
        elif cur is not None and line == "```":
            out.append((cur[0], "\n".join(cur[1]), cur[2]))
            cur = None
        elif cur is not None:
            cur[1].append(line)
    if cur is not None:
        sys.exit("%s:%d: unterminated block" % (path, cur[2]))
    return out


def extract(path, outdir):
    os.makedirs(outdir, exist_ok=True)
    bs = blocks(path)
    events, expect = [], []
    n_rej = n_curl = 0
    have = {"dead-letter": 0, "criteo": 0}
    for i, (info, text, line) in enumerate(bs):
        role = info[1] if len(info) > 1 else None
        lines = [l for l in text.split("\n") if l.strip()]
        if info[0] == "json" and role == "event":
            events += lines
            expect += ["ok"] * len(lines)
        elif info[0] == "json" and role == "event-rejected":
            reason, settings = info[2], info[3:]
            if settings:
                base = os.path.join(outdir, "rejected-%d" % n_rej)
                open(base + ".json", "w").write("\n".join(lines) + "\n")
                open(base + ".reason", "w").write(reason + "\n")
                open(base + ".set", "w").write("\n".join(settings) + "\n")
                n_rej += 1
            else:
                events += lines
                expect += [reason] * len(lines)
        elif info[0] == "tsv" and role == "dead-letter":
            open(os.path.join(outdir, "dead-letter.tsv"), "w").write(text + "\n")
            have["dead-letter"] += 1
        elif info[0] == "sh" and role == "criteo":
            open(os.path.join(outdir, "criteo.sh"), "w").write(text + "\n")
            have["criteo"] += 1
        elif info[0] == "sh" and role == "curl":
            nxt = bs[i + 1] if i + 1 < len(bs) else None
            if not nxt or nxt[0][:2] != ["json", "response"]:
                sys.exit("%s:%d: a curl block without a json response block after it" % (path, line))
            if len(lines) != 1 or not lines[0].startswith("curl "):
                sys.exit("%s:%d: a curl block holds one curl command" % (path, line))
            base = os.path.join(outdir, "curl-%d" % n_curl)
            open(base + ".sh", "w").write(lines[0] + "\n")
            open(base + ".status", "w").write(info[2] + "\n")
            open(base + ".response", "w").write(nxt[1] + "\n")
            json.loads(nxt[1])  # the documented answer is JSON
            n_curl += 1
    for e, x in zip(events, expect):
        if x == "ok":
            json.loads(e)  # an accepted event is JSON as Python reads it too
    open(os.path.join(outdir, "events.json"), "w").write("\n".join(events) + "\n")
    open(os.path.join(outdir, "events.expect"), "w").write("\n".join(expect) + "\n")
    if not events or not n_curl or have["dead-letter"] != 1 or have["criteo"] != 1:
        sys.exit("%s: missing tested blocks (events %d, curls %d, %s)" % (path, len(events), n_curl,
                                                                         have))
    print("formats_doc: %d events (%d accepted), %d blocks with settings, %d curl commands"
          % (len(events), expect.count("ok"), n_rej, n_curl))


def shape(a, b, where="$"):
    """None when b has a's shape, else where it differs."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return where + ": not an object"
        if a and all(k.isdigit() for k in a):  # a map (partition -> offset): kinds only
            for k, v in b.items():
                if not k.isdigit():
                    return "%s: key %r is not decimal" % (where, k)
                r = shape(next(iter(a.values())), v, "%s[%s]" % (where, k))
                if r:
                    return r
            return None if b else where + ": empty"
        if set(a) != set(b):
            return "%s: members %s, want %s" % (where, sorted(b), sorted(a))
        for k in a:
            r = shape(a[k], b[k], "%s.%s" % (where, k))
            if r:
                return r
        return None
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return "%s: want an array of %d" % (where, len(a))
        for i, (x, y) in enumerate(zip(a, b)):
            r = shape(x, y, "%s[%d]" % (where, i))
            if r:
                return r
        return None
    kind = lambda v: "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) \
        else type(v).__name__
    return None if kind(a) == kind(b) else "%s: %s, want %s" % (where, kind(b), kind(a))


def compare(expected_path, actual_path, status):
    want = json.loads(open(expected_path).read())
    text = open(actual_path).read()
    try:
        got = json.loads(text)
    except ValueError:
        sys.exit("not JSON: %r" % text[:300])
    if status == "200":
        r = shape(want, got)
        if r:
            sys.exit("shape differs at %s: got %s" % (r, text.strip()))
    elif want != got:
        sys.exit("body %s, want %s" % (text.strip(), json.dumps(want)))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "compare":
        compare(*sys.argv[2:])
    else:
        sys.exit(__doc__)
