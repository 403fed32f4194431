"""A reader of `sparrow export`'s output directory (docs/FORMATS.md): metadata.json, and
rows.tsv (tsv) or keys.npy + weights.npy (npy), plus removed.tsv / removed.npy after --since.

numpy is optional: with it (use_numpy True, or None when it is importable) keys, removed and
weights are numpy arrays (uint64, uint64, float32 of shape (n, dim)); without it, lists of ints and
lists of lists of floats, read with the standard library (the .npy files too)."""

import array
import ast
import json
import os
import struct
import sys

__all__ = ["Export", "read_export", "read_npy"]


class Export:
    """One export: metadata (the dict of metadata.json), keys, weights (row i belongs to keys[i],
    dim floats each, weights[i][0] the linear weight and [1:] the FM latent vector), removed (the
    keys an incremental export says are gone; empty for a full one)."""

    def __init__(self, metadata, keys, weights, removed):
        self.metadata = metadata
        self.keys = keys
        self.weights = weights
        self.removed = removed

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
    if len(removed) != meta["removed"]:
        raise ValueError("%s: %d removed keys, metadata says %d" %
                         (path, len(removed), meta["removed"]))
    return Export(meta, keys, weights, removed)
