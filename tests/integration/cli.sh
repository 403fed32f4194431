#!/usr/bin/env bash
# The `sparrow` command line: help, unknown commands, configuration precedence and errors.
# usage: cli.sh PATH_TO_SPARROW SCRATCH_DIR
set -euo pipefail
sparrow=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_lib.sh"
FAIL_LOGS=()

"$sparrow" --help | grep -c "gen" >/dev/null || fail "--help does not list gen"
"$sparrow" gen --help | grep -c "gen.seed" >/dev/null || fail "gen --help does not document gen.seed"
if "$sparrow" no-such-command 2>"$dir/err"; then fail "unknown command exited 0"; fi
grep -q "unknown command" "$dir/err" || fail "unknown command not reported"

# Precedence: default < file < env < --set.
printf 'gen.seed = 11\ngen.ctr = 0.3\n# comment\n' >"$dir/gen.conf"
"$sparrow" gen --config "$dir/gen.conf" --dump-config >"$dir/dump1"
grep -Eq '^gen.seed *= *11' "$dir/dump1" || fail "file value not applied"
SPARROW_GEN_SEED=12 "$sparrow" gen --config "$dir/gen.conf" --dump-config >"$dir/dump2"
grep -Eq '^gen.seed *= *12' "$dir/dump2" || fail "env does not override file"
grep -Eq '^gen.ctr *= *0.3' "$dir/dump2" || fail "file value lost under env"
SPARROW_GEN_SEED=12 "$sparrow" gen --config "$dir/gen.conf" --set gen.seed=13 --dump-config \
    >"$dir/dump3"
grep -Eq '^gen.seed *= *13' "$dir/dump3" || fail "--set does not override env"

# The dump is itself a valid configuration file.
"$sparrow" gen --config "$dir/dump3" --dump-config >"$dir/dump4"
grep -Eq '^gen.seed *= *13' "$dir/dump4" || fail "dump does not load back"

# Bad values name the key and the allowed range; the exit code is non-zero.
if "$sparrow" gen --set gen.fields=0 --n 1 2>"$dir/err"; then fail "out-of-range value accepted"; fi
grep -q "gen.fields" "$dir/err" || fail "range error does not name the key"
if "$sparrow" gen --set gen.format=xml --n 1 2>"$dir/err"; then fail "bad enum accepted"; fi
grep -q "pb" "$dir/err" || fail "enum error does not list the choices"
if "$sparrow" gen --set no.such.key=1 2>"$dir/err"; then fail "unknown key accepted"; fi
grep -q "no.such.key" "$dir/err" || fail "unknown key not named"
if "$sparrow" gen --n 12abc 2>"$dir/err"; then fail "trailing garbage accepted"; fi
echo "cli: all checks passed"
