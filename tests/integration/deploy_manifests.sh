#!/usr/bin/env bash
# deploy/: renders every kustomize overlay, lints it, asserts the hardening and configuration rules
# (deploy_check.py), runs every role's --dump-config on the ConfigMap's files, and proves that the
# check catches broken manifests (each mutation below must be reported); deploy/monitoring: the
# alert rules through promtool (check and unit tests), kept in step with OPERATIONS.md's table, the
# dashboard's queries through promtool, the PodMonitor against the rendered workloads
# (monitoring_check.py; deploy_metrics.sh checks that the metrics they name exist).
# usage: deploy_manifests.sh PATH_TO_SPARROW SCRATCH_DIR [sanitize=LIST]
#   sanitize=LIST: the build's SPARROW_SANITIZE (empty: none)
set -euo pipefail
sparrow=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=$2
sanitize=${3#sanitize=}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tests/integration"
conf="$root/deploy/k8s/base/config"
rm -rf "$dir" && mkdir -p "$dir/scratch"

for tool in kubectl yamllint python3 promtool; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/install-deps.sh)"; exit 1; }
done
python3 -c 'import yaml' || { echo "FAIL: PyYAML is missing (python3-yaml)"; exit 1; }

# 1. Every role accepts its configuration file as it stands.
for role in pserver trainer coordinator serve ingest; do
    if ! "$sparrow" "$role" --config "$conf/$role.conf" --dump-config >"$dir/$role.dump" 2>"$dir/$role.err"; then
        echo "FAIL: sparrow $role --config $conf/$role.conf --dump-config:"; cat "$dir/$role.err"
        exit 1
    fi
done
# ... and --dump-config does validate: a misspelt property is refused.
{ cat "$conf/pserver.conf"; echo "pserver.lisen = tcp://0.0.0.0:7000"; } >"$dir/typo.conf"
if "$sparrow" pserver --config "$dir/typo.conf" --dump-config >/dev/null 2>&1; then
    echo "FAIL: sparrow pserver accepted a misspelt property"; exit 1
fi

# 2. Render and lint.
yamllint -c "$root/deploy/.yamllint" -s "$root/deploy"
for overlay in cpu gpu; do
    if ! kubectl kustomize "$root/deploy/k8s/overlays/$overlay" >"$dir/$overlay.yaml" 2>"$dir/$overlay.err"; then
        echo "FAIL: kubectl kustomize deploy/k8s/overlays/$overlay:"; cat "$dir/$overlay.err"
        exit 1
    fi
    yamllint -c "$root/deploy/.yamllint" -s "$dir/$overlay.yaml"
    # 3. The rules.
    python3 "$here/deploy_check.py" "$dir/$overlay.yaml" "$overlay" "$sparrow" "$conf" "$dir/scratch"
done

# 3b. Monitoring: the rules, their unit tests, the table, the dashboard, the PodMonitor.
mon="$root/deploy/monitoring"
promtool check rules "$mon/alerts.yaml" >"$dir/promtool-rules.out" 2>&1 ||
    { cat "$dir/promtool-rules.out"; echo "FAIL: promtool check rules deploy/monitoring/alerts.yaml"; exit 1; }
(cd "$mon" && promtool test rules alerts_test.yaml) >"$dir/promtool-test.out" 2>&1 ||
    { cat "$dir/promtool-test.out"; echo "FAIL: promtool test rules deploy/monitoring/alerts_test.yaml"; exit 1; }
if ! kubectl kustomize "$mon" >"$dir/monitoring.yaml" 2>"$dir/monitoring.err"; then
    echo "FAIL: kubectl kustomize deploy/monitoring:"; cat "$dir/monitoring.err"; exit 1
fi
python3 "$here/monitoring_check.py" static "$dir/cpu.yaml" "$dir/monitoring.yaml" "$dir/scratch"
echo "deploy_manifests: $(grep -c 'alert:' "$mon/alerts.yaml") alert rules pass promtool check and test"

# 4. The check fails on broken manifests: each mutation of the cpu (or gpu) rendering must be
# reported with the expected message.
mutate() { # mutate OVERLAY NAME PYTHON-STATEMENT EXPECTED-MESSAGE
    local overlay=$1 name=$2 stmt=$3 want=$4
    python3 - "$dir/$overlay.yaml" "$dir/mut-$name.yaml" "$stmt" <<'EOF'
import sys, yaml
docs = [d for d in yaml.load_all(open(sys.argv[1]), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
def find(kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
def ctr(kind, name):
    return find(kind, name)["spec"]["template"]["spec"]["containers"][0]
exec(sys.argv[3])
yaml.dump_all(docs, open(sys.argv[2], "w"), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
EOF
    if python3 "$here/deploy_check.py" "$dir/mut-$name.yaml" "$overlay" "$sparrow" "$conf" \
        "$dir/scratch" >"$dir/mut-$name.out" 2>&1; then
        echo "FAIL: the check accepted mutation '$name'"; exit 1
    fi
    if ! grep -qF -- "$want" "$dir/mut-$name.out"; then
        echo "FAIL: mutation '$name': expected '$want' in:"; cat "$dir/mut-$name.out"; exit 1
    fi
    echo "deploy_manifests: mutation '$name' caught"
}
mutate cpu no-readiness 'del ctr("Deployment", "trainer")["readinessProbe"]' \
    "trainer/trainer: no readinessProbe"
mutate cpu writable-root 'ctr("Deployment", "serve")["securityContext"]["readOnlyRootFilesystem"] = False' \
    "serve/serve: readOnlyRootFilesystem is not true"
mutate cpu caps 'ctr("StatefulSet", "pserver")["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}' \
    "pserver/pserver: capabilities do not drop ALL"
mutate cpu no-limits 'del ctr("Deployment", "coordinator")["resources"]["limits"]' \
    "coordinator/coordinator: no limits.cpu"
mutate cpu token 'find("Deployment", "ingest")["spec"]["template"]["spec"]["automountServiceAccountToken"] = True' \
    "ingest: automountServiceAccountToken is not false"
mutate cpu replicas 'find("StatefulSet", "pserver")["spec"]["replicas"] = 3' \
    "pserver StatefulSet has 3 replicas but pserver.shards = 2"
mutate cpu shard-list 'ctr("Deployment", "trainer")["env"].append({"name": "SPARROW_TRAINER_SHARDS", "value": "tcp://pserver-0.pserver:7000"})' \
    "trainer.shards = 'tcp://pserver-0.pserver:7000'"
mutate cpu bad-property 'ctr("Deployment", "serve")["args"] += ["--set", "serve.http.prot=8080"]' \
    "serve: sparrow serve"
mutate cpu no-pdb 'docs[:] = [d for d in docs if not (d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "serve")]' \
    "serve: no PodDisruptionBudget selects its pods"
mutate cpu open-pserver 'find("NetworkPolicy", "pserver")["spec"]["ingress"][0]["from"].append({"namespaceSelector": {}})' \
    "pserver port 7000 is reachable from"
mutate cpu no-deny 'docs[:] = [d for d in docs if d["metadata"]["name"] != "default-deny"]' \
    "no default-deny NetworkPolicy"
mutate cpu selector 'find("Deployment", "trainer")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "trainers"' \
    "trainer: selector"
mutate cpu scrape-port 'find("Deployment", "trainer")["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] = "9100"' \
    "trainer: prometheus.io/port '9100', the configuration says 9200"
mutate cpu grace 'find("Deployment", "trainer")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30' \
    "trainer: terminationGracePeriodSeconds 30 does not exceed trainer.shutdown.grace + trainer.kafka.close.timeout"
mutate cpu rwo-checkpoints 'find("PersistentVolumeClaim", "sparrow-checkpoints")["spec"]["accessModes"] = ["ReadWriteOnce"]' \
    "the checkpoint PVC is not ReadWriteMany"
mutate cpu service-port 'find("Service", "serve")["spec"]["ports"][0]["targetPort"] = 8081' \
    "Service serve port http targets no container port"
mutate cpu no-instance-label 'del find("NetworkPolicy", "default-deny")["metadata"]["labels"]["app.kubernetes.io/instance"]' \
    "NetworkPolicy/default-deny: no label app.kubernetes.io/instance"
mutate cpu pod-labels 'del find("Deployment", "serve")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]' \
    "Deployment/serve pod template: no label app.kubernetes.io/managed-by"
mutate cpu version-label 'find("ConfigMap", [d for d in docs if d["kind"] == "ConfigMap"][0]["metadata"]["name"])["metadata"]["labels"]["app.kubernetes.io/version"] = "0.0.9"' \
    "app.kubernetes.io/version is '0.0.9', the binary is"
mutate cpu image-tag 'ctr("Deployment", "ingest")["image"] = "registry.example.com/sparrow:0.0.9"' \
    "Deployment/ingest: image registry.example.com/sparrow:0.0.9, but app.kubernetes.io/version"
mutate cpu unexposed-port 'ctr("Deployment", "trainer")["ports"].append({"name": "debug", "containerPort": 9999})' \
    "Deployment/trainer: container port debug (9999) is not EXPOSEd by"
mutate gpu no-gpu 'del ctr("Deployment", "trainer")["resources"]["limits"]["nvidia.com/gpu"]' \
    "gpu overlay: trainers do not request nvidia.com/gpu: 1"
mutate gpu cpu-backend 'ctr("Deployment", "trainer")["env"] = [e for e in ctr("Deployment", "trainer")["env"] if e["name"] != "SPARROW_TRAINER_BACKEND"]' \
    "gpu overlay: trainer.backend = 'cpu', want cuda"
# 5. The image: its build stage runs the README's steps, and its runtime stage installs a package
# for every shared library the binary needs (glibc, libgcc and libstdc++ come with debian:12-slim,
# whose apt needs them).
df="$root/deploy/docker/Dockerfile"
grep -qx 'RUN scripts/install-deps.sh' "$df" || { echo "FAIL: Dockerfile does not run scripts/install-deps.sh"; exit 1; }
grep -q 'make build' "$df" || { echo "FAIL: Dockerfile does not run make build"; exit 1; }
runtime=$(python3 -c '
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
stage = text.split(" AS runtime", 1)[1]
m = re.search(r"apt-get install ([^&]*)", stage)
print(" ".join(w for w in m.group(1).split() if not w.startswith("-")))
' "$df")
[ -n "$runtime" ] || { echo "FAIL: no apt-get install in the Dockerfile's runtime stage"; exit 1; }
libs=()
for lib in $(readelf -d "$sparrow" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
    # a sanitizer build links RocksDB shared (tests/tsan.supp names it); the image's build, like
    # `make build`, links its static archive, whose libraries the check of that build covers
    if [ -n "$sanitize" ] && [[ $lib == librocksdb.so* ]]; then
        echo "deploy_manifests: $lib not checked: a sanitizer build ($sanitize) links RocksDB shared, the image's build statically"
        continue
    fi
    libs+=("$lib")
done
# the packages owning each library, from one dpkg search (a search per library took 0.65 s each)
declare -A owners=()
while IFS= read -r line; do
    [[ $line == *": /"* && $line != diversion* ]] || continue
    path=${line#*: /}
    pkgs=${line%%: /*}
    owners[${path##*/}]+=" $(sed 's/:[a-z0-9_]*//g; s/,/ /g' <<<"$pkgs")"
done < <(dpkg -S "${libs[@]/#/*/}" 2>/dev/null || true)
for lib in "${libs[@]}"; do
    pkgs=$(tr ' ' '\n' <<<"${owners[$lib]:-}" | sed '/^$/d' | sort -u)
    ok=0
    for p in $pkgs; do
        case " $runtime libc6 libgcc-s1 libstdc++6 " in *" $p "*) ok=1 ;; esac
    done
    [ $ok -eq 1 ] || { echo "FAIL: $lib (from: $pkgs) is not in the image's runtime packages: $runtime"; exit 1; }
done
echo "deploy_manifests: the image's runtime packages ($runtime) cover every library the binary needs"
echo "deploy_manifests: overlays cpu and gpu render, lint and satisfy every rule"
