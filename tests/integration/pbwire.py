"""Protobuf wire helpers for the integration tests' checks of length-delimited record files
(sparrow ingest's file output and sparrow gen's pb format), also used by bench/ to split such
files: no generated code needed."""


def varint(b, i):
    """The base-128 varint at b[i:]: (value, index after it)."""
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7f) << s
        s += 7
        if c < 0x80:
            return r, i


def put_varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7f) | (0x80 if v > 0x7f else 0))
        v >>= 7
        if not v:
            return bytes(out)


def records(path):
    """The messages of a file of varint-length-prefixed messages."""
    data = open(path, "rb").read()
    i, recs = 0, []
    while i < len(data):
        n, i = varint(data, i)
        recs.append(data[i:i + n])
        i += n
    return recs


def fields(msg):
    """(tag, raw bytes of the whole field) of each field of msg, in order."""
    j, out = 0, []
    while j < len(msg):
        start = j
        tag, j = varint(msg, j)
        wt = tag & 7
        if wt == 0:
            _, j = varint(msg, j)
        elif wt == 1:
            j += 8
        elif wt == 5:
            j += 4
        elif wt == 2:
            m, j = varint(msg, j)
            j += m
        else:
            raise ValueError("wire type %d" % wt)
        out.append((tag, msg[start:j]))
    return out


def batch_examples(batch):
    """The serialised sparrow.Example messages of an ExampleBatch (field 1, length-delimited);
    asserts that it holds nothing else."""
    out = []
    for tag, raw in fields(batch):
        assert tag == (1 << 3 | 2), tag
        _, j = varint(raw, 0)
        n, j = varint(raw, j)
        out.append(raw[j:j + n])
    return out


def model_update_rows(msg):
    """The rows of a sparrow.ModelUpdate (docs/FORMATS.md), single or batch: a list of dicts
    with key, version, weights (raw little-endian float32 bytes; b"" for a single tombstone),
    tombstone, event_ms and applied_ms, plus the record's epoch and shard."""
    import struct
    f = {}
    for tag, raw in fields(msg):
        _, j = varint(raw, 0)
        wt = tag & 7
        if wt == 0:
            v, _ = varint(raw, j)
        elif wt == 1:
            (v,) = struct.unpack("<Q", raw[j:j + 8])
        elif wt == 2:
            ln, j = varint(raw, j)
            v = raw[j:j + ln]
        else:
            v = raw[j:]
        f[tag >> 3] = v
    rec = {"epoch": f.get(5, 0), "shard": f.get(6, 0)}
    if 9 not in f:
        return [dict(rec, key=f.get(1), version=f.get(4, 0), weights=f.get(2, b""),
                     tombstone=bool(f.get(3, 0)), event_ms=f.get(7, 0), applied_ms=f.get(8, 0))]
    n = len(f[9]) // 8
    keys = struct.unpack("<%dQ" % n, f[9])
    vers = struct.unpack("<%dI" % n, f[10])
    ev = struct.unpack("<%dq" % n, f[11])
    ap = struct.unpack("<%dq" % n, f[12])
    tombs = f[13]
    w = f.get(2, b"")
    row = len(w) // n
    return [dict(rec, key=keys[i], version=vers[i], weights=w[i * row:(i + 1) * row],
                 tombstone=bool(tombs[i]), event_ms=ev[i], applied_ms=ap[i]) for i in range(n)]
