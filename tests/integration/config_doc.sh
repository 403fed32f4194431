#!/usr/bin/env bash
# docs/CONFIGURATION.md is generated from the property tables and must match them (`make docs`).
# usage: config_doc.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
sparrow=$1
dir=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$dir" && mkdir -p "$dir"
"$sparrow" config-doc --out "$dir/CONFIGURATION.md"
if ! diff -u "$root/docs/CONFIGURATION.md" "$dir/CONFIGURATION.md"; then
    echo "FAIL: docs/CONFIGURATION.md is stale: run 'make docs' and commit it"
    exit 1
fi
echo "config_doc: docs/CONFIGURATION.md is up to date"
