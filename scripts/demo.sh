#!/usr/bin/env bash
# `make demo`: runs the whole pipeline locally for 30 s (`sparrow demo`: Kafka mock, generator
# producing to Kafka with drift, coordinator, two shards, two CPU trainers, serve), with a live
# progress line and a final summary naming the run directory that holds every log.
# usage: scripts/demo.sh PATH_TO_SPARROW [extra `sparrow demo` arguments]
set -euo pipefail
sparrow=${1:-build/sparrow}
shift || true
run_dir=$(cd "$(dirname "$sparrow")" && pwd)/demo-run
rm -rf "$run_dir"
exec "$sparrow" demo --duration 30 --run-dir "$run_dir" "$@"
