#!/usr/bin/env bash
# clients/python's unittest suite (sparrow_client: the key hash against `sparrow hash`, the serve
# client against a real `sparrow serve` on a file-trained checkpoint, the export reader), run with
# the first python3 that imports numpy (Debian's python3-numpy may belong to /usr/bin/python3
# only), else without it (the numpy tests skip).
# usage: python_client.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
SPARROW=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
DIR=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
rm -rf "$DIR" && mkdir -p "$DIR"
PY=python3
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then
        PY=$p
        break
    fi
done
echo "python_client: $($PY --version 2>&1) ($PY), numpy: $($PY -c 'import numpy; print(numpy.__version__)' 2>/dev/null || echo none)"
cd "$DIR"
SPARROW="$SPARROW" SPW_TEST_DIR="$DIR" PYTHONPATH="$ROOT/clients/python:$HERE" \
    "$PY" -m unittest discover -s "$ROOT/clients/python/tests" -v
