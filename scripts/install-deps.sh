#!/usr/bin/env bash
# Installs every Debian package that Sparrow's build, tests, fuzzers and benchmarks need.
# Idempotent: packages already present are left as they are; apt-get only.
set -euo pipefail

packages=(
    build-essential cmake make pkg-config git
    clang llvm libclang-rt-14-dev clang-format clang-tidy
    librdkafka-dev librocksdb-dev
    # RocksDB's libraries, for its static archive (cmake/SparrowDeps.cmake; librocksdb-dev depends
    # on them too)
    libgflags-dev libsnappy-dev libbz2-dev liblz4-dev libzstd-dev
    libprotobuf-c-dev protobuf-c-compiler
    libcmocka-dev libzmq3-dev libmicrohttpd-dev
    libxxhash-dev libjson-c-dev libopenblas-dev zlib1g-dev
    kcat prometheus wrk
    gnuplot-nox time procps curl python3
)
# deploy/ checks: yamllint, PyYAML and a kubectl (Debian's kubernetes-client, unless a kubectl from
# another package is present: the two conflict on /usr/bin/kubectl).
packages+=(yamllint python3-yaml)
# clients/python: numpy loads an export's .npy files (its tests)
packages+=(python3-numpy)
# bench/study_deep.py: the PyTorch peer of DeepFM (bench/deepfm_torch.py, Debian's python3)
packages+=(python3-torch)
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
