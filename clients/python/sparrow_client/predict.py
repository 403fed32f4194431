"""A client of `sparrow serve`'s HTTP API (serve/include/sparrow/serve.h): POST /v1/predict,
GET /v1/rows/KEY, /readyz and /healthz. Standard library only (urllib)."""

import json
import struct
import time
import urllib.error
import urllib.request

from . import predictpb

__all__ = ["Client", "ServeError"]


class ServeError(Exception):
    """An answer other than 200: status is the HTTP status, message the server's "error" text."""

    def __init__(self, status, message):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status = status
        self.message = message


def _example(features=None, weights=None, keys=None):
    """One example of a predict body: raw features (a dict of field name to value, a value
    being a str, number, bool, None or a list of them) with optional per-feature weights (a dict),
    or pre-hashed keys (ints) with optional weights (a list, one per key)."""
    if (features is None) == (keys is None):
        raise ValueError("give features or keys, not both")
    if features is not None:
        ex = {"features": features}
        if weights:
            ex["weight"] = weights
        return ex
    ex = {"keys": [str(int(k)) for k in keys]}  # decimal strings carry every u64 exactly
    if weights is not None:
        ex["weights"] = [float(w) for w in weights]
    return ex


class Client:
    """`sparrow serve` at base_url ("http://127.0.0.1:8080"); token: the bearer token of
    serve.auth.token_file, if one is configured. Thread-safe (no state between calls)."""

    def __init__(self, base_url, token=None, timeout=10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        status, raw = self._send(method, path, data, "application/json")
        return status, raw.decode("utf-8", "replace")

    def _send(self, method, path, data, content_type):
        """(status, body bytes) of a request with data (None: no body) of content_type."""
        headers = {"Accept": content_type}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def _json(self, method, path, body=None):
        status, text = self._request(method, path, body)
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            doc = {"error": text}
        if status != 200:
            raise ServeError(status, doc.get("error", text) if isinstance(doc, dict) else text)
        return doc

    def predict(self, features=None, weights=None, keys=None):
        """The click probability of one example (see predict_many for the forms)."""
        return self.predict_many([_example(features, weights, keys)])[0]

    def predict_many(self, examples):
        """Probabilities of many examples in one request. Each example is a dict of raw features
        ({"user": "u1", "hour": 13}), or a dict already in the body's form ({"features": ...,
        "weight": ...} or {"keys": [...], "weights": [...]})."""
        body = []
        for ex in examples:
            if isinstance(ex, dict) and ("features" in ex or "keys" in ex):
                body.append(ex)
            else:
                body.append(_example(features=ex))
        return self.predict_response({"examples": body})["predictions"]

    def predict_response(self, body):
        """The whole answer to a predict body: {"predictions": [...], "epoch": E,
        "update_offsets": {partition: next offset}}."""
        return self._json("POST", "/v1/predict", body)

    def predict_keys_pb(self, examples):
        """The answer to a protobuf body (Content-Type application/x-protobuf, the pre-hashed
        fast path): examples is a list of (keys, weights or None). Returns the dict of
        predict_response (predictions are float32 values); ServeError on a refusal."""
        data = predictpb.encode_predict_request(examples)
        status, raw = self._send("POST", "/v1/predict", data, predictpb.CONTENT_TYPE)
        try:
            doc = predictpb.decode_predict_reply(raw)
        except (ValueError, IndexError, struct.error):
            doc = {"error": raw.decode("utf-8", "replace")}  # the HTTP layer's text answers
        if status != 200:
            raise ServeError(status, doc.get("error") or raw.decode("utf-8", "replace"))
        return doc

    def row(self, key):
        """The row of a feature key: {"key": "K", "version": V, "weights": [...], "epoch": E,
        ...}; None when serve holds no row for it."""
        try:
            return self._json("GET", "/v1/rows/%d" % int(key))
        except ServeError as e:
            if e.status == 404:
                return None
            raise

    def ready(self):
        """True once /readyz answers 200 (the checkpoint loaded; caught up with the stream)."""
        try:
            return self._request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout=30.0, interval=0.05):
        """Polls /readyz until ready; False after timeout seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.ready():
                return True
            time.sleep(interval)
        return False
