"""sparrow_client.keyhash: XXH64's published vectors, and equality with `sparrow hash` (the
binary in $SPARROW) over names, numbers, odd bytes, Criteo columns and shard placement."""

import os
import subprocess
import unittest

from sparrow_client import keyhash
from sparrow_client.keyhash import criteo_key, feature_key, field_id, shard_of, xxh64

SPARROW = os.environ.get("SPARROW")


class TestXXH64(unittest.TestCase):
    def test_published_vectors(self):
        self.assertEqual(xxh64(b""), 0xEF46DB3751D8E999)
        self.assertEqual(xxh64(b"abc"), 0x44BC2CF5AD770999)
        self.assertEqual(xxh64(b"", 1), 0xD5AFBA1336A3BE4B)

    def test_every_length_path(self):
        # 0..70 bytes covers the 32-byte stripes, the 8-, 4- and 1-byte tails; each distinct
        seen = {xxh64(bytes(range(n)), 7) for n in range(71)}
        self.assertEqual(len(seen), 71)

    def test_field_ids(self):
        self.assertEqual(field_id("13"), 13)
        self.assertEqual(field_id("2147483647"), 2147483647)
        self.assertEqual(field_id("2147483648"), xxh64(b"2147483648") & 0x7FFFFFFF)
        self.assertEqual(field_id("013"), xxh64(b"013") & 0x7FFFFFFF)
        self.assertEqual(field_id("user", {"user": 5}), 5)
        # the Criteo reader's precomputed table (ingest/src/parse_criteo.c): I1 and C26
        self.assertEqual(field_id("I1"), 0x4E67040E)
        self.assertEqual(field_id("C26"), 0x1DDDF045)

    def test_value_forms(self):
        self.assertEqual(feature_key("hour", 13), feature_key("hour", "13"))
        self.assertEqual(feature_key("ok", True), feature_key("ok", "true"))
        self.assertEqual(feature_key(7, "x"), xxh64(b"x", 7))

    def test_jump_hash_spreads(self):
        counts = [0] * 4
        for k in range(4000):
            counts[shard_of(k, 4)] += 1
        self.assertTrue(all(800 < c < 1200 for c in counts), counts)
        self.assertEqual({shard_of(k, 1) for k in range(100)}, {0})


@unittest.skipUnless(SPARROW, "SPARROW (the sparrow binary) is not set")
class TestAgainstSparrowHash(unittest.TestCase):
    def sparrow_hash(self, *args):
        out = subprocess.run([SPARROW, "hash", *args], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        return [line.split("\t") for line in out.splitlines()]

    def test_names_and_values(self):
        values = ["u1", "13", "", "a b", "50%,x", "ünï", "x" * 100, "-5", "--set"]
        for field in ["user", "C1", "7", "0", "2147483648", "a field"]:
            got = self.sparrow_hash(field, "--", *values)
            self.assertEqual([int(g[0]) for g in got], [feature_key(field, v) for v in values],
                             field)

    def test_shards(self):
        values = ["v%d" % i for i in range(50)]
        got = self.sparrow_hash("--shards", "3", "item", *values)
        for (key, shard), v in zip(got, values):
            self.assertEqual(int(key), feature_key("item", v))
            self.assertEqual(int(shard), shard_of(int(key), 3))

    def test_criteo(self):
        got = self.sparrow_hash("--format", "criteo", "I3", "0", "2", "3", "1234", "--", "-7")
        self.assertEqual([int(g[0]) for g in got],
                         [criteo_key("I3", v) for v in ["0", "2", "3", "1234", "-7"]])
        got = self.sparrow_hash("--format", "criteo", "C12", "68fd1e64")
        self.assertEqual(int(got[0][0]), criteo_key("C12", "68fd1e64"))
        self.assertEqual(keyhash.criteo_bucket(1234), 50)

    def test_schema(self):
        path = os.path.join(os.environ.get("SPW_TEST_DIR", "."), "schema.txt")
        with open(path, "w") as f:
            f.write("# fields\nuser = 3\n")
        got = self.sparrow_hash("--schema", path, "user", "u1")
        self.assertEqual(int(got[0][0]), feature_key("user", "u1", keyhash.load_schema(path)))
        self.assertEqual(int(got[0][0]), xxh64(b"u1", 3))


if __name__ == "__main__":
    unittest.main()
