"""Sparrow's feature-key hash in pure Python, equal to `sparrow hash` (docs/FORMATS.md).

key = XXH64(value bytes, seed = field id); the field id of a name is the name itself when it is a
decimal number up to 2**31 - 1 (no leading zero), else the low 31 bits of XXH64(name, seed 0),
unless a schema maps the name; a key lives on shard jump_hash(mix64(key), n_shards).
"""

import json
import math
import struct

__all__ = ["xxh64", "field_id", "feature_key", "criteo_field_id", "criteo_key", "criteo_bucket",
           "mix64", "jump_hash", "shard_of", "load_schema", "FIELD_ID_MAX"]

FIELD_ID_MAX = 0x7FFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M64


def xxh64(data, seed=0):
    """XXH64 of bytes (a str is taken as UTF-8) with a 64-bit seed, as an int."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    data = bytes(data)
    n = len(data)
    seed &= _M64
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed
        v4 = (seed - _P1) & _M64
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def load_schema(path):
    """A schema file's `name = id` lines ('#' comments) as a dict (as trainer.schema)."""
    schema = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, value = line.split("=", 1)
                schema[name.strip()] = int(value.strip())
    return schema


def field_id(name, schema=None):
    """The field id of a field name (str or bytes); schema: a dict of names to ids, or None."""
    if schema and name in schema:
        return schema[name]
    raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    if 0 < len(raw) <= 10 and raw.isdigit() and (len(raw) == 1 or raw[:1] != b"0"):
        v = int(raw)
        if v <= FIELD_ID_MAX:
            return v
    return xxh64(raw, 0) & FIELD_ID_MAX


def feature_key(field, value, schema=None):
    """The key of one value of a field, as the JSON reader, ingest and serve compute it: field is
    a name (or an int id), value the value's text (str or bytes; a JSON number's literal text, a
    bool as "true"/"false")."""
    fid = field if isinstance(field, int) else field_id(field, schema)
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, int):
        value = str(value)
    elif isinstance(value, float):  # the literal the predict client sends (json.dumps)
        value = json.dumps(value)
    return xxh64(value, fid)


def criteo_bucket(x):
    """The Criteo convention for integer columns: above 2, floor(ln(x)^2)."""
    if x <= 2:
        return x
    return int(math.floor(math.log(x) ** 2))


def criteo_field_id(column):
    """The field id of Criteo column "I1".."I13" or "C1".."C26"."""
    return field_id(column)


def criteo_key(column, value):
    """The key the Criteo reader gives value (str) of column "I1".."I13" / "C1".."C26"."""
    fid = criteo_field_id(column)
    if column.startswith("I"):
        value = str(criteo_bucket(int(value)))
    return xxh64(value, fid)


def mix64(x):
    """SplitMix64's finaliser (the shard placement's mixer)."""
    x &= _M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    x ^= x >> 31
    return x


def jump_hash(key, buckets):
    """Jump consistent hash (Lamping & Veach), exactly as common/src/hash.c computes it."""
    b, j = -1, 0
    key &= _M64
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & _M64
        j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def shard_of(key, n_shards):
    """The shard (0..n_shards-1) holding key."""
    return jump_hash(mix64(key), n_shards)
