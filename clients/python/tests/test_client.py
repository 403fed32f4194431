"""sparrow_client against a real `sparrow serve` (the binary in $SPARROW): a small generated file
trained by `sparrow trainer --shards inproc --checkpoint-dir`, exported by `sparrow export` (tsv
and npy), served offline from the checkpoint. The client's predictions equal serve's computation
and fm_predict over the exported rows with the Python key hash; rows, errors and readiness; the
export reader with and without numpy. Processes and ports come from tests/integration/cluster.py.
"""

import json
import os
import struct
import subprocess
import tempfile
import unittest

import sparrow_client
from sparrow_client import Client, ServeError, feature_key, fm_predict, read_export

SPARROW = os.environ.get("SPARROW")
try:
    import numpy
except ImportError:
    numpy = None

if SPARROW:
    import cluster  # tests/integration/cluster.py, on PYTHONPATH


def f32(x):
    """x rounded to the nearest float32 (as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(*args, **kw):
    return subprocess.run([SPARROW, *args], check=True, capture_output=True, text=True,
                          timeout=120, **kw)


@unittest.skipUnless(SPARROW, "SPARROW (the sparrow binary) is not set")
class TestAgainstServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.environ.get("SPW_TEST_DIR") or tempfile.mkdtemp(prefix="spw-py-")
        os.makedirs(cls.dir, exist_ok=True)
        os.chdir(cls.dir)
        run("gen", "--n", "6000", "--seed", "5", "--fields", "6", "--latent-dim", "3",
            "--vocab-max", "80", "--signal", "2", "--format", "json", "--out", "all.json")
        lines = open("all.json").read().splitlines()
        with open("train.json", "w") as f:
            f.write("\n".join(lines[:5000]) + "\n")
        cls.held = [json.loads(line) for line in lines[5000:5200]]
        run("trainer", "--in", "file:train.json", "--format", "json", "--shards", "inproc:2",
            "--model", "fm", "--latent-dim", "3", "--batch", "256", "--backend", "cpu",
            "--http-port", "-1", "--checkpoint-dir", "ck", "--set",
            "trainer.checkpoint.interval=0")
        run("export", "--checkpoint", "ck", "--to", "ex-tsv")
        run("export", "--checkpoint", "ck", "--to", "ex-npy", "--format", "npy")
        cls.serve = cluster.spawn([SPARROW, "serve", "--checkpoint-dir", "ck", "--port", "0",
                                   "--port-file", "serve.port", "--set",
                                   "serve.log.dir=" + cls.dir], "serve")
        port = int(cluster.wait_file("serve.port", 30))
        cls.client = Client("http://127.0.0.1:%d" % port)
        if not cls.client.wait_ready(30):
            raise RuntimeError("serve never became ready")
        cls.export = read_export("ex-tsv", use_numpy=False)
        cls.rows = cls.export.as_dict()

    @classmethod
    def tearDownClass(cls):
        cls.serve.terminate()
        cls.serve.wait(timeout=30)

    def test_ready_and_metadata(self):
        self.assertTrue(self.client.ready())
        meta = self.export.metadata
        self.assertEqual((meta["model"], meta["dim"], meta["epoch"]), ("fm", 4, 1))
        self.assertEqual(meta["example_count"], 5000)
        self.assertEqual(len(self.export), meta["rows"])
        self.assertIn(0, self.rows)  # the bias row

    def test_predictions_match_the_export(self):
        features = [ex["features"] for ex in self.held]
        got = self.client.predict_many(features)
        self.assertEqual(len(got), len(features))
        for f, p in zip(features, got):
            self.assertAlmostEqual(p, fm_predict(f, self.rows, 4), delta=1e-5)
        self.assertGreater(len({round(p, 6) for p in got}), 50)
        self.assertTrue(all(p != 0.5 for p in got))

    def test_one_example_keys_and_features_agree(self):
        f = self.held[0]["features"]
        keys = [feature_key(name, v) for name, v in f.items()]
        self.assertAlmostEqual(self.client.predict(features=f), self.client.predict(keys=keys),
                               delta=1e-7)
        self.assertAlmostEqual(self.client.predict(keys=keys, weights=[1.0] * len(keys)),
                               self.client.predict(keys=keys), delta=1e-7)
        whole = self.client.predict_response({"features": f})
        self.assertEqual(whole["epoch"], 1)

    def _bad_requests(self):
        status, text = self.client._request("GET", "/metrics")
        self.assertEqual(status, 200)
        line = [l for l in text.splitlines() if l.startswith("sparrow_serve_bad_requests_total")]
        return float(line[0].split()[-1])

    def test_protobuf_agrees_with_json(self):
        examples = []
        for i, ex in enumerate(self.held[:64]):
            keys = [feature_key(name, v) for name, v in ex["features"].items()]
            weights = [0.25 + 0.5 * (j % 3) for j in range(len(keys))] if i % 2 else None
            examples.append((keys, weights))
        examples.append(([2 ** 64 - 1, 0], None))  # a key above 2^53 and the bias key
        body = {"examples": [{"keys": [str(k) for k in keys]} if w is None else
                             {"keys": [str(k) for k in keys], "weights": w}
                             for keys, w in examples]}
        want = self.client.predict_response(body)
        got = self.client.predict_keys_pb(examples)
        self.assertEqual(len(got["predictions"]), len(examples))
        # the same float32 probabilities: JSON prints them with %.9g, which round-trips a float32
        self.assertEqual(got["predictions"], [f32(p) for p in want["predictions"]])
        self.assertEqual(got["epoch"], want["epoch"])
        self.assertEqual(got["update_offsets"], {k: v for k, v in want["update_offsets"].items()})
        self.assertNotIn("dense_version", got)
        self.assertGreater(len(set(got["predictions"])), 20)

    def test_protobuf_refusals(self):
        from sparrow_client.predictpb import CONTENT_TYPE, decode_predict_reply
        before = self._bad_requests()
        status, raw = self.client._send("POST", "/v1/predict", b"\x0a\x05\x0a", CONTENT_TYPE)
        self.assertEqual(status, 400)
        self.assertIn("undecodable protobuf", decode_predict_reply(raw)["error"])
        with self.assertRaises(ServeError) as e:
            self.client.predict_keys_pb([([1], None)] * 1025)
        self.assertEqual(e.exception.status, 400)
        self.assertIn("1025 examples (1..1024 allowed)", e.exception.message)
        with self.assertRaises(ServeError) as e:
            self.client.predict_keys_pb([(list(range(4097)), None)])
        self.assertIn("more than the limit 4096", e.exception.message)
        self.assertEqual(self._bad_requests(), before + 3)
        # serve goes on (a body above serve.max_body is the HTTP layer's 413, tested in test_http)
        self.assertTrue(self.client.ready())
        self.assertEqual(len(self.client.predict_keys_pb([([1, 2], None)])["predictions"]), 1)

    def test_rows(self):
        key = feature_key("C1", self.held[0]["features"]["C1"])
        row = self.client.row(key)
        self.assertIsNotNone(row)
        self.assertEqual(row["key"], str(key))
        self.assertEqual(row["weights"], self.rows[key])
        self.assertIsNone(self.client.row(feature_key("C1", "never-seen-value")))

    def test_bad_request(self):
        with self.assertRaises(ServeError) as e:
            self.client.predict_response({"features": {"a": "b"}, "nonsense": 1})
        self.assertEqual(e.exception.status, 400)
        with self.assertRaises(ValueError):
            self.client.predict(features={"a": "b"}, keys=[1])

    def test_export_formats_agree(self):
        plain = read_export("ex-npy", use_numpy=False)
        self.assertEqual(list(plain.keys), list(self.export.keys))
        for a, b in zip(plain.weights, self.export.weights):
            # %.9g round-trips a float32: the tsv's decimals are the npy's floats, rounded
            self.assertEqual(list(a), [f32(x) for x in b])
        self.assertEqual(plain.removed, [])

    @unittest.skipUnless(numpy, "numpy is not installed")
    def test_export_numpy(self):
        ex = read_export("ex-npy")
        self.assertEqual(ex.keys.dtype, numpy.uint64)
        self.assertEqual(ex.weights.dtype, numpy.float32)
        self.assertEqual(ex.weights.shape, (len(self.export), 4))
        tsv = read_export("ex-tsv")  # the tsv as numpy arrays too
        self.assertTrue((tsv.keys == ex.keys).all())
        self.assertTrue((tsv.weights == ex.weights).all())

    def test_version(self):
        self.assertTrue(sparrow_client.__version__)


if __name__ == "__main__":
    unittest.main()
