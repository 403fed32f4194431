"""The protobuf form of POST /v1/predict (proto/sparrow.proto: PredictRequest, PredictReply;
docs/FORMATS.md), encoded and decoded by hand: standard library only, no generated code."""

import struct

__all__ = ["CONTENT_TYPE", "encode_predict_request", "decode_predict_reply"]

CONTENT_TYPE = "application/x-protobuf"


def _varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _field(number, payload):
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_predict_request(examples):
    """PredictRequest bytes of examples, each (keys, weights or None): keys are feature keys
    (0..2^64-1, see feature_key), weights one float per key (None: every key weighs 1)."""
    out = bytearray()
    for keys, weights in examples:
        keys = [int(k) for k in keys]
        ex = b""
        if keys:
            ex += _field(1, struct.pack("<%dQ" % len(keys), *keys))
        if weights is not None:
            weights = [float(w) for w in weights]
            if len(weights) != len(keys):
                raise ValueError("%d weights for %d keys" % (len(weights), len(keys)))
            if weights:
                ex += _field(2, struct.pack("<%df" % len(weights), *weights))
        out += _field(1, ex)
    return bytes(out)


def _read_varint(b, i):
    r = s = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    """(number, wire type, value) of each field of a message: ints for varints, bytes for
    length-delimited and fixed fields."""
    i = 0
    while i < len(b):
        tag, i = _read_varint(b, i)
        number, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _read_varint(b, i)
        elif wt == 2:
            n, i = _read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        yield number, wt, v


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_predict_reply(data):
    """A PredictReply as the JSON reply's dict: {"predictions": [...], "epoch": E,
    "update_offsets": {partition: next offset}, "dense_version": V (deep models only)} or, for a
    refusal, {"error": "..."}. Predictions are float32 values (as Python floats)."""
    doc = {"predictions": [], "update_offsets": {}}
    for number, wt, v in _fields(data):
        if number == 1 and wt == 2:
            doc["predictions"] += list(struct.unpack("<%df" % (len(v) // 4), v))
        elif number == 1 and wt == 5:
            doc["predictions"].append(struct.unpack("<f", v)[0])
        elif number == 2:
            doc["epoch"] = v
        elif number == 3:
            part = off = 0
            for n2, _, v2 in _fields(v):
                if n2 == 2:
                    part = _signed64(v2)
                elif n2 == 3:
                    off = _signed64(v2)
            doc["update_offsets"][str(part)] = off
        elif number == 4:
            doc["dense_version"] = v
        elif number == 5:
            doc["error"] = v.decode("utf-8", "replace")
    return doc
