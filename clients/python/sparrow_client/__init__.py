"""sparrow_client: Sparrow from Python, standard library only.

- Client: predictions and rows from `sparrow serve` (POST /v1/predict, GET /v1/rows/KEY);
- read_export: the files of `sparrow export` (numpy arrays when numpy is installed);
- feature_key, field_id, shard_of: the feature-key hash, equal to `sparrow hash`.

docs/FORMATS.md describes the export files and the hash.
"""

from .export import Export, predict_example, read_export, read_npy
from .keyhash import (criteo_bucket, criteo_key, feature_key, field_id, jump_hash, load_schema,
                      mix64, shard_of, xxh64)
from .predict import Client, ServeError

__version__ = "0.1.0"

__all__ = ["Client", "ServeError", "Export", "read_export", "read_npy", "feature_key",
           "field_id", "criteo_key", "criteo_bucket", "xxh64", "mix64", "jump_hash", "shard_of",
           "load_schema", "fm_predict", "predict_example"]


def fm_predict(features, rows, dim, schema=None):
    """The model's probability of one example computed locally from exported rows (a dict of key
    to weights), as serve computes it: the bias row (key 0) plus each feature's linear weight
    and, for an FM (dim > 1), the pairwise interactions of the latent vectors; keys without a row
    weigh nothing. features: {field: value or list of values}. A deep model's: Export.predict."""
    return predict_example({"features": features}, rows.get, dim, schema)
