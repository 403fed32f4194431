"""A reader of `sparrow export`'s output directory (docs/FORMATS.md): metadata.json, and
rows.tsv (tsv) or keys.npy + weights.npy (npy), plus removed.tsv / removed.npy after --since and
dense.tsv / dense.npy for a deep model; and Export.predict, the model's prediction from the export
alone (the formula `sparrow serve` computes), a reference for porting the model to another stack.

numpy is optional: with it (use_numpy True, or None when it is importable) keys, removed and
weights are numpy arrays (uint64, uint64, float32 of shape (n, dim)); without it, lists of ints and
lists of lists of floats, read with the standard library (the .npy files too)."""

import array
import ast
import json
import math
import os
import struct
import sys

from .keyhash import feature_key, field_id

__all__ = ["Export", "read_export", "read_npy", "predict_example"]


class Export:
    """One export: metadata (the dict of metadata.json), keys, weights (row i belongs to keys[i],
    dim floats each, weights[i][0] the linear weight and [1:] the FM latent vector), removed (the
    keys an incremental export says are gone; empty for a full one), dense (a deep model's
    network weights, metadata["dense"]["params"] floats in the layout metadata["dense"]["layers"]
    gives; None for LR and FM)."""

    def __init__(self, metadata, keys, weights, removed, dense=None):
        self.metadata = metadata
        self.keys = keys
        self.weights = weights
        self.removed = removed
        self.dense = dense
        self._index = None  # key -> row, and the network's weights as floats: built once
        self._dense_floats = None

    @property
    def dim(self):
        return self.metadata["dim"]

    @property
    def epoch(self):
        return self.metadata["epoch"]

    def __len__(self):
        return len(self.keys)

    def rows(self):
        """(key, weights) pairs, ascending by key (keys as Python ints)."""
        for i in range(len(self.keys)):
            yield int(self.keys[i]), self.weights[i]

    def as_dict(self):
        """{key: weights} of every row."""
        return {k: w for k, w in self.rows()}

    def predict(self, example, schema=None):
        """The click probability of one example, as `sparrow serve` computes it from this model:
        example is a predict body's example, {"features": {name: value or [values]}, "weight":
        {name: x}} (docs/FORMATS.md), schema a dict of field names to ids (or None). A key the
        export does not hold is a row of zeros. Standard library only; a full export is needed
        (an incremental one holds only the changed rows)."""
        if self.metadata.get("since_epoch") is not None:
            raise ValueError("predict needs a full export, not an incremental one")
        if self._index is None:
            self._index = {int(k): i for i, k in enumerate(self.keys)}
            if self.dense is not None:
                self._dense_floats = [float(v) for v in self.dense]

        def row_of(key):
            i = self._index.get(key)
            return None if i is None else self.weights[i]

        return predict_example(example, row_of, self.dim, schema, self.metadata.get("dense"),
                               self._dense_floats)


def predict_example(example, row_of, dim, schema=None, dense_meta=None, dense=None):
    """The probability of example ({"features": ..., "weight": ...}) under the model whose row of
    a key is row_of(key) (dim floats, or None: zeros), with a deep model's network (dense_meta:
    metadata.json's "dense", dense: its weights, a list of floats) when given: the formula of
    docs/FORMATS.md."""
    zero = [0.0] * dim
    weight = example.get("weight") or {}
    occs = []  # (field id, x, row) per feature
    for name, value in example["features"].items():
        fid = field_id(name, schema)
        x = float(weight.get(name, 1.0))
        for v in value if isinstance(value, list) else [value]:
            if v is None:
                continue
            row = row_of(feature_key(fid, v))
            occs.append((fid, x, zero if row is None else [float(w) for w in row]))
    bias = row_of(0)
    z = float(bias[0]) if bias is not None else 0.0
    z += sum(x * row[0] for _, x, row in occs)
    for f in range(1, dim):
        s = sum(x * row[f] for _, x, row in occs)
        q = sum((x * row[f]) ** 2 for _, x, row in occs)
        z += 0.5 * (s * s - q)
    if dense_meta:
        z += _network_logit(dense_meta, dense, dim - 1, occs)
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def _network_logit(d, p, k, occs):
    """The deep model's network (sparrow/dense.h) on the pooled field embeddings of occs."""
    slots = {f["id"]: s for s, f in enumerate(d["fields"])}
    counts = [0] * len(slots)
    for fid, _, _ in occs:
        if fid in slots:
            counts[slots[fid]] += 1
    x0 = [0.0] * d["in_dim"]
    for fid, x, row in occs:
        s = slots.get(fid)
        if s is None:
            continue
        if d["fields"][s]["pooling"] == "mean":
            x /= counts[s]
        for j in range(k):
            x0[s * k + j] += x * row[1 + j]
    h = x0
    for layer in d["layers"]:
        n_in, n_out = layer["in"], layer["out"]
        wo, bo = layer["weight_offset"], layer["bias_offset"]
        y = [p[bo + o] + sum(p[wo + o * n_in + i] * h[i] for i in range(n_in))
             for o in range(n_out)]
        if layer["kind"] == "cross":  # x_{l+1} = x0 * (W x_l + b) + x_l
            h = [x0[i] * y[i] + h[i] for i in range(n_out)]
        elif layer["kind"] == "hidden":
            h = [max(v, 0.0) for v in y]
        else:
            return y[0]
    raise ValueError("the dense layers end without an output layer")


def _numpy(use_numpy):
    if use_numpy is False:
        return None
    try:
        import numpy  # noqa: F401 (optional)
        return numpy
    except ImportError:
        if use_numpy:
            raise
        return None


def read_npy(path):
    """A 1-d '<u8' or 2-d '<f4' C-order .npy file without numpy: (shape, flat array.array)."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic[:6] != b"\x93NUMPY":
            raise ValueError("%s: not a .npy file" % path)
        major = magic[6]
        (hlen,) = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
        if header.get("fortran_order"):
            raise ValueError("%s: Fortran order is not read" % path)
        codes = {"<u8": "Q", "<f4": "f", "<i8": "q", "<f8": "d"}
        descr = header["descr"]
        if descr not in codes:
            raise ValueError("%s: dtype %s is not read" % (path, descr))
        shape = tuple(header["shape"])
        count = 1
        for s in shape:
            count *= s
        data = array.array(codes[descr])
        if data.itemsize != int(descr[2:]):
            raise ValueError("%s: this platform's %s is not %s bytes" % (path, codes[descr],
                                                                         descr[2:]))
        if count:
            data.frombytes(f.read(count * data.itemsize))
        if len(data) != count:
            raise ValueError("%s: %d of %d values" % (path, len(data), count))
        if sys.byteorder == "big":
            data.byteswap()
        return shape, data


def _read_tsv(path, dim):
    keys, weights = [], []
    with open(path, encoding="ascii") as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != dim + 1:
                raise ValueError("%s:%d: %d columns, expected %d" % (path, n, len(cols), dim + 1))
            keys.append(int(cols[0]))
            weights.append([float(x) for x in cols[1:]])
    return keys, weights


def _read_keys_tsv(path):
    with open(path, encoding="ascii") as f:
        return [int(line) for line in f if line.strip()]


def read_export(path, use_numpy=None):
    """Reads the export directory path (see the module's doc for use_numpy)."""
    with open(os.path.join(path, "metadata.json"), encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("format") != "sparrow-export":
        raise ValueError("%s: not a sparrow export" % path)
    np = _numpy(use_numpy)
    files, dim = meta["files"], meta["dim"]
    removed = []
    if meta["files_format"] == "tsv":
        keys, weights = _read_tsv(os.path.join(path, files["rows"]), dim)
        if "removed" in files:
            removed = _read_keys_tsv(os.path.join(path, files["removed"]))
        if np is not None:
            keys = np.array(keys, dtype=np.uint64)
            weights = np.array(weights, dtype=np.float32).reshape(len(keys), dim)
            removed = np.array(removed, dtype=np.uint64)
    else:
        names = {"keys": files["keys"], "weights": files["weights"]}
        if "removed" in files:
            names["removed"] = files["removed"]
        if np is not None:
            got = {k: np.load(os.path.join(path, v)) for k, v in names.items()}
            keys, weights = got["keys"], got["weights"]
            removed = got.get("removed", np.zeros(0, dtype=np.uint64))
        else:
            _, keys = read_npy(os.path.join(path, names["keys"]))
            shape, flat = read_npy(os.path.join(path, names["weights"]))
            keys = list(keys)
            weights = [list(flat[i * dim:(i + 1) * dim]) for i in range(shape[0])]
            if "removed" in names:
                removed = list(read_npy(os.path.join(path, names["removed"]))[1])
    if len(keys) != meta["rows"] or len(weights) != meta["rows"]:
        raise ValueError("%s: %d keys and %d rows, metadata says %d" %
                         (path, len(keys), len(weights), meta["rows"]))
    dense = None
    if meta.get("dense"):
        dpath = os.path.join(path, meta["files"]["dense"])
        if meta["files_format"] == "tsv":
            with open(dpath, encoding="ascii") as f:
                dense = [float(line) for line in f if line.strip()]
            if np is not None:
                dense = np.array(dense, dtype=np.float32)
        else:
            dense = np.load(dpath) if np is not None else list(read_npy(dpath)[1])
        if len(dense) != meta["dense"]["params"]:
            raise ValueError("%s: %d dense weights, metadata says %d" %
                             (path, len(dense), meta["dense"]["params"]))
    if len(removed) != meta["removed"]:
        raise ValueError("%s: %d removed keys, metadata says %d" %
                         (path, len(removed), meta["removed"]))
    return Export(meta, keys, weights, removed, dense)
