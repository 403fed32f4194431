#!/usr/bin/env bash
# `make demo`: runs Sparrow's main job on the embedded default. Until the trainers and shards exist,
# that is the synthetic click stream: one million examples with drift, then the generator's summary.
# usage: scripts/demo.sh PATH_TO_SPARROW
set -euo pipefail
sparrow=${1:-build/sparrow}
out=$(dirname "$sparrow")/demo
mkdir -p "$out"
echo "demo: sparrow gen -> $out/examples.pb (1,000,000 examples, 39 fields, FM k=4, drift 0.5 rad/M)"
"$sparrow" gen --n 1000000 --seed 7 --fields 39 --latent-dim 4 --drift 0.5 --format pb \
    --out "$out/examples.pb"
echo "demo: the first example as JSON:"
"$sparrow" gen --n 1 --seed 7 --format json --out -
