#!/usr/bin/env python3
"""Asserts Sparrow's deployment rules on one overlay rendered by `kubectl kustomize`.

usage: deploy_check.py RENDERED.yaml OVERLAY(cpu|gpu) SPARROW_BINARY CONFIG_DIR SCRATCH_DIR

Every workload: probes, requests and limits, the restricted security context, no service-account
token, a PodDisruptionBudget and NetworkPolicies selecting it, selectors matching its labels,
Prometheus annotations on its metrics port, a grace period longer than its SIGTERM drain. The
configuration: each container's real command line (config file from the ConfigMap, --set values,
SPARROW_* environment) is run through `sparrow <role> --dump-config`, and the effective values are
compared with the manifests (ports, shard count and names, shared checkpoint directory, backend).
Every object, pod template and claim template: the app.kubernetes.io/* labels (name, instance,
version = the binary's version = the image tag, component, part-of, managed-by). The image
(deploy/docker/Dockerfile): EXPOSEs every container port of the manifests.
Exits 1 with one line per violated rule.
"""
import hashlib
import json
import os
import re
import subprocess
import sys

import yaml

# libyaml's loader where PyYAML has it (Debian's python3-yaml does): 3x faster on the renderings
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
ROLES_WITH_HTTP = {"pserver": "pserver.http.port", "trainer": "trainer.http.port",
                   "serve": "serve.http.port", "ingest": "ingest.http.port",
                   "coordinator": "coordinator.http.port"}
# Roles whose SIGTERM drain has configured bounds, one after the other: the grace period must
# exceed their sum.
DRAIN_PROPS = {"trainer": ("trainer.shutdown.grace", "trainer.kafka.close.timeout"),
               "ingest": ("ingest.shutdown.timeout", "ingest.kafka.close.timeout")}
KAFKA_ROLES = ("trainer", "ingest", "serve", "pserver")
PUBLIC_ROLE = "serve"

errors = []


def problem(msg):
    errors.append(msg)


def labels_match(selector, labels):
    """True when a matchLabels/matchExpressions selector selects an object with `labels`."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        val = labels.get(e["key"])
        op = e["operator"]
        if op == "In" and val not in e.get("values", []):
            return False
        if op == "NotIn" and val in e.get("values", []):
            return False
        if op == "Exists" and e["key"] not in labels:
            return False
        if op == "DoesNotExist" and e["key"] in labels:
            return False
    return True


def duration_s(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text.strip())
    if not m:
        raise ValueError("bad duration %r" % text)
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


def port_of(ep):
    m = re.fullmatch(r"tcp://([^:/]+):(\d+)", ep)
    if not m:
        raise ValueError("bad endpoint %r" % ep)
    return m.group(1), int(m.group(2))


def run_cached(argv, env, scratch):
    """(returncode, stdout, stderr) of argv run in scratch with env, kept in scratch/runs keyed
    by the binary (path, size, mtime), the arguments, the environment and the contents of the
    files named in the arguments: deploy_manifests checks its two renderings and 23 mutations of
    them, which mostly run the same command lines (under a sanitizer a run costs 0.1-0.2 s)."""
    st = os.stat(argv[0])
    key = {"bin": [argv[0], st.st_size, st.st_mtime_ns], "argv": argv, "env": sorted(env.items()),
           "files": [open(a, "rb").read().hex() for a in argv[1:] if os.path.isfile(a)]}
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    path = os.path.join(scratch, "runs", digest + ".json")
    try:
        with open(path) as f:
            return tuple(json.load(f))
    except (OSError, ValueError):
        pass
    proc = subprocess.run(argv, env=env, cwd=scratch, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)
    result = (proc.returncode, proc.stdout, proc.stderr)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)  # whole or absent: another check may read it at once
    return result


def effective_config(binary, role, container, config_dir, scratch):
    """Runs the container's own arguments with --dump-config; returns {key: value}."""
    args = list(container.get("args") or [])
    cmd = container.get("command")
    if cmd:
        problem("%s: container overrides the image's ENTRYPOINT (command: %s)" % (role, cmd))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = "0"  # the pod index of pserver-0
        else:
            env[e["name"]] = "placeholder-" + e["name"].lower()
    out = []
    i = 0
    while i < len(args):
        a = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), args[i])
        if a == "--config" and i + 1 < len(args):
            path = args[i + 1]
            local = os.path.join(config_dir, os.path.basename(path))
            if not os.path.isfile(local):
                problem("%s: --config %s is not a file of the ConfigMap" % (role, path))
            out += [a, local]
            i += 2
            continue
        out.append(a)
        i += 1
    if not out or out[0] != role:
        problem("%s: first argument is %r, not the role" % (role, out[:1]))
        return {}
    rc, stdout, stderr = run_cached([binary] + out + ["--dump-config"], env, scratch)
    if rc != 0:
        problem("%s: sparrow %s --dump-config refused the configuration: %s"
             % (role, " ".join(out), stderr.strip()))
        return {}
    conf = {}
    for line in stdout.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        conf[k.strip()] = v.strip()
    return conf


def container_ports(c):
    return {p.get("name"): p["containerPort"] for p in c.get("ports") or []}


def resolve_port(c, port):
    ports = container_ports(c)
    if isinstance(port, int):
        return port if port in ports.values() else None
    return ports.get(port)


def check_probe(role, c, kind, probe, http_port):
    if not probe:
        problem("%s/%s: no %s" % (role, c["name"], kind))
        return
    handler = probe.get("httpGet") or probe.get("tcpSocket") or probe.get("grpc")
    if handler is None and "exec" not in probe:
        problem("%s/%s: %s has no handler" % (role, c["name"], kind))
        return
    if handler is not None:
        p = resolve_port(c, handler.get("port"))
        if p is None:
            problem("%s/%s: %s port %r is not a container port" % (role, c["name"], kind,
                                                                handler.get("port")))
        if "httpGet" in probe:
            want = "/readyz" if kind == "readinessProbe" else "/healthz"
            if probe["httpGet"].get("path") != want:
                problem("%s/%s: %s path %r, want %s" % (role, c["name"], kind,
                                                     probe["httpGet"].get("path"), want))
            if http_port is not None and p != http_port:
                problem("%s/%s: %s on port %r but the role's HTTP endpoint is %d"
                     % (role, c["name"], kind, p, http_port))
    if http_port is not None and "httpGet" not in probe:
        problem("%s/%s: %s is not an HTTP probe although the role serves /healthz" % (role, c["name"],
                                                                                  kind))


def check_security(role, pod, c):
    psc = pod.get("securityContext") or {}
    sc = c.get("securityContext") or {}

    def either(key):
        return sc.get(key, psc.get(key))

    if either("runAsNonRoot") is not True:
        problem("%s/%s: runAsNonRoot is not true" % (role, c["name"]))
    uid = either("runAsUser")
    if uid is None or uid == 0:
        problem("%s/%s: runAsUser must be a non-zero uid (got %r)" % (role, c["name"], uid))
    if sc.get("allowPrivilegeEscalation") is not False:
        problem("%s/%s: allowPrivilegeEscalation is not false" % (role, c["name"]))
    if sc.get("readOnlyRootFilesystem") is not True:
        problem("%s/%s: readOnlyRootFilesystem is not true" % (role, c["name"]))
    if sc.get("privileged"):
        problem("%s/%s: privileged" % (role, c["name"]))
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        problem("%s/%s: capabilities do not drop ALL" % (role, c["name"]))
    if caps.get("add"):
        problem("%s/%s: adds capabilities %s" % (role, c["name"], caps["add"]))
    seccomp = (either("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        problem("%s/%s: seccompProfile is %r, want RuntimeDefault" % (role, c["name"], seccomp))


def check_resources(role, c):
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(part) or {}):
                problem("%s/%s: no %s.%s" % (role, c["name"], part, r))


def mounted(c, path):
    """The volumeMount of c under which `path` lies, or None."""
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    return best


# The recommended labels every object carries (a claim template: all but version, because a
# StatefulSet's volumeClaimTemplates cannot change after creation).
LABEL_KEYS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
              "app.kubernetes.io/component", "app.kubernetes.io/part-of",
              "app.kubernetes.io/managed-by")
DOCKERFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "docker",
                          "Dockerfile")


def check_labels(what, labels, version, with_version=True):
    """The recommended labels on one object's (or template's) metadata."""
    labels = labels or {}
    for key in LABEL_KEYS:
        if key == "app.kubernetes.io/version" and not with_version:
            if key in labels:
                problem("%s: carries %s (claim templates cannot change it)" % (what, key))
            continue
        if not labels.get(key):
            problem("%s: no label %s" % (what, key))
    for key, want in (("app.kubernetes.io/name", "sparrow"), ("app.kubernetes.io/part-of", "sparrow"),
                      ("app.kubernetes.io/managed-by", "kustomize")):
        if key in labels and labels[key] != want:
            problem("%s: %s is %r, want %r" % (what, key, labels[key], want))
    if with_version and labels.get("app.kubernetes.io/version") not in (None, version):
        problem("%s: app.kubernetes.io/version is %r, the binary is %s"
                % (what, labels.get("app.kubernetes.io/version"), version))


def dockerfile_exposed():
    """The ports deploy/docker/Dockerfile EXPOSEs."""
    ports = set()
    for line in open(DOCKERFILE).read().replace("\\\n", " ").splitlines():
        words = line.split()
        if words and words[0] == "EXPOSE":
            ports.update(int(w.split("/")[0]) for w in words[1:])
    return ports


def main():
    if len(sys.argv) != 6:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    rendered, overlay, binary, config_dir, scratch = sys.argv[1:]
    binary = os.path.abspath(binary)
    config_dir = os.path.abspath(config_dir)
    docs = [d for d in yaml.load_all(open(rendered), Loader=YAML_LOADER) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    # Labels: every object, its pod template and claim templates.
    rc, stdout, stderr = run_cached([binary, "--version"], {"PATH": os.environ.get("PATH", "")},
                                    scratch)
    if rc != 0:
        sys.exit("deploy_check: %s --version failed: %s" % (binary, stderr.strip()))
    version = stdout.split()[-1]
    for d in docs:
        what = "%s/%s" % (d["kind"], d["metadata"]["name"])
        check_labels(what, d["metadata"].get("labels"), version)
        spec = d.get("spec") or {}
        if "template" in spec and d["kind"] in WORKLOAD_KINDS:
            check_labels(what + " pod template", spec["template"]["metadata"].get("labels"), version)
        for t in spec.get("volumeClaimTemplates") or []:
            check_labels("%s claim template %s" % (what, t["metadata"]["name"]),
                         t["metadata"].get("labels"), version, with_version=False)
        if d["kind"] in WORKLOAD_KINDS:
            for c in spec["template"]["spec"].get("containers") or []:
                tag = c["image"].rsplit(":", 1)[-1] if ":" in c["image"] else None
                if tag is not None and tag.replace("-cuda", "") != version:
                    problem("%s: image %s, but app.kubernetes.io/version and the binary are %s"
                            % (what, c["image"], version))
    # The image exposes every port a container declares.
    exposed = dockerfile_exposed()
    for d in docs:
        if d["kind"] not in WORKLOAD_KINDS:
            continue
        for c in d["spec"]["template"]["spec"].get("containers") or []:
            for name, port in sorted(container_ports(c).items(), key=lambda x: str(x[0])):
                if port not in exposed:
                    problem("%s/%s: container port %s (%d) is not EXPOSEd by %s"
                            % (d["kind"], d["metadata"]["name"], name, port,
                               os.path.relpath(DOCKERFILE)))

    namespaces = by_kind.get("Namespace", [])
    if len(namespaces) != 1:
        problem("want exactly one Namespace, got %d" % len(namespaces))
    ns = namespaces[0]["metadata"]["name"] if namespaces else None
    for d in docs:
        if d["kind"] != "Namespace" and d["metadata"].get("namespace") != ns:
            problem("%s/%s is not in namespace %s" % (d["kind"], d["metadata"]["name"], ns))

    workloads = [d for d in docs if d["kind"] in WORKLOAD_KINDS]
    roles = {}
    for w in workloads:
        role = w["metadata"]["name"]
        if role in roles:
            problem("two workloads named %s" % role)
        roles[role] = w
    for want in ("pserver", "coordinator", "trainer", "serve"):
        if want not in roles:
            problem("no workload %s" % want)
    if roles.get("pserver", {}).get("kind") != "StatefulSet":
        problem("pserver is not a StatefulSet")

    pdbs = by_kind.get("PodDisruptionBudget", [])
    netpols = by_kind.get("NetworkPolicy", [])
    services = by_kind.get("Service", [])
    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    pvcs = {p["metadata"]["name"]: p for p in by_kind.get("PersistentVolumeClaim", [])}
    sas = {s["metadata"]["name"]: s for s in by_kind.get("ServiceAccount", [])}
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}

    # The ConfigMap's files must be the checked-in ones (kustomize copied them unchanged).
    sparrow_cms = [c for c in configmaps.values() if c["metadata"]["name"].startswith("sparrow-config")]
    if len(sparrow_cms) != 1:
        problem("want one sparrow-config ConfigMap, got %d" % len(sparrow_cms))
    else:
        for name, text in sparrow_cms[0].get("data", {}).items():
            path = os.path.join(config_dir, name)
            if not os.path.isfile(path) or open(path).read() != text:
                problem("ConfigMap file %s differs from %s" % (name, path))

    for name, s in secrets.items():
        for k, v in (s.get("stringData") or {}).items():
            if "REPLACE" not in v:
                problem("Secret %s key %s holds something other than a placeholder" % (name, k))
        if s.get("data"):
            problem("Secret %s carries data: only stringData placeholders belong in the repository"
                 % name)

    default_deny = [p for p in netpols if p["spec"].get("podSelector") in ({}, None)
                    and not p["spec"].get("ingress") and not p["spec"].get("egress")
                    and set(p["spec"].get("policyTypes") or []) == {"Ingress", "Egress"}]
    if not default_deny:
        problem("no default-deny NetworkPolicy (podSelector {}, Ingress and Egress, no rules)")

    conf = {}
    for role, w in sorted(roles.items()):
        spec = w["spec"]
        tmpl = spec["template"]
        labels = tmpl["metadata"].get("labels") or {}
        pod = tmpl["spec"]
        if not labels_match(spec.get("selector"), labels):
            problem("%s: selector %s does not match the pod labels %s" % (role, spec.get("selector"),
                                                                      labels))
        if pod.get("automountServiceAccountToken") is not False:
            problem("%s: automountServiceAccountToken is not false" % role)
        sa = pod.get("serviceAccountName")
        if sa not in sas:
            problem("%s: serviceAccountName %r is not defined here" % (role, sa))
        elif sas[sa].get("automountServiceAccountToken") is not False:
            problem("ServiceAccount %s mounts a token" % sa)
        if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
            problem("%s: uses host namespaces" % role)
        grace = pod.get("terminationGracePeriodSeconds")
        if not isinstance(grace, int) or grace <= 0:
            problem("%s: no terminationGracePeriodSeconds" % role)
            grace = 0
        if not [p for p in pdbs if labels_match(p["spec"].get("selector"), labels)]:
            problem("%s: no PodDisruptionBudget selects its pods" % role)
        for p in pdbs:
            if labels_match(p["spec"].get("selector"), labels) and p["spec"].get("maxUnavailable") == 0:
                problem("%s: PDB %s has maxUnavailable 0 (blocks every drain)" % (role,
                                                                               p["metadata"]["name"]))
        own_pols = [p for p in netpols if p not in default_deny
                    and labels_match(p["spec"].get("podSelector") or {}, labels)
                    and p["spec"].get("podSelector")]
        if not own_pols:
            problem("%s: no NetworkPolicy beyond default-deny selects its pods" % role)

        containers = pod.get("containers") or []
        if len(containers) != 1:
            problem("%s: want one container, got %d" % (role, len(containers)))
            continue
        c = containers[0]
        if pod.get("initContainers"):
            problem("%s: unexpected initContainers" % role)
        cfg = effective_config(binary, role, c, config_dir, scratch)
        conf[role] = cfg
        http_port = None
        if role in ROLES_WITH_HTTP and cfg:
            http_port = int(cfg.get(ROLES_WITH_HTTP[role], "-1"))
            addr = cfg.get(ROLES_WITH_HTTP[role].replace(".port", ".addr"))
            if addr != "0.0.0.0":
                problem("%s: HTTP endpoint binds %r: probes and Prometheus cannot reach it" % (role,
                                                                                           addr))
            if http_port not in container_ports(c).values():
                problem("%s: HTTP port %d (configuration) is not a container port" % (role,
                                                                                  http_port))
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            check_probe(role, c, kind, c.get(kind), http_port)
        check_resources(role, c)
        check_security(role, pod, c)

        ann = tmpl["metadata"].get("annotations") or {}
        if http_port is not None:
            if ann.get("prometheus.io/scrape") != "true":
                problem("%s: serves /metrics but prometheus.io/scrape is not \"true\"" % role)
            if ann.get("prometheus.io/port") != str(http_port):
                problem("%s: prometheus.io/port %r, the configuration says %d"
                     % (role, ann.get("prometheus.io/port"), http_port))
            if ann.get("prometheus.io/path") != "/metrics":
                problem("%s: prometheus.io/path is not /metrics" % role)
        elif role not in ROLES_WITH_HTTP and ann.get("prometheus.io/scrape") != "false":
            problem("%s: no HTTP endpoint, so prometheus.io/scrape must say \"false\"" % role)

        if role in DRAIN_PROPS and cfg:
            drain = sum(duration_s(cfg[k]) for k in DRAIN_PROPS[role])  # effective: all set
            if grace <= drain:
                problem("%s: terminationGracePeriodSeconds %d does not exceed %s = %gs"
                     % (role, grace, " + ".join(DRAIN_PROPS[role]), drain))

        # Every file or directory the configuration names must be on a mounted volume.
        for key, val in cfg.items():
            if val.startswith("/") and (key.endswith(("_file", ".dir", "data_dir", ".location"))):
                m = mounted(c, val)
                if m is None:
                    problem("%s: %s = %s is on no volume (read-only root filesystem)" % (role, key,
                                                                                      val))
        if mounted(c, "/tmp") is None:
            problem("%s: no writable /tmp (read-only root filesystem)" % role)

        # Every volume claim, secret and config map the pod names exists.
        for v in pod.get("volumes") or []:
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in pvcs:
                problem("%s: volume %s names a missing PVC" % (role, v["name"]))
            if "secret" in v and v["secret"]["secretName"] not in secrets:
                problem("%s: volume %s names a missing Secret" % (role, v["name"]))
            if "configMap" in v and v["configMap"]["name"] not in configmaps:
                problem("%s: volume %s names a missing ConfigMap" % (role, v["name"]))
            if "hostPath" in v:
                problem("%s: hostPath volume %s" % (role, v["name"]))
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and (ref["name"] not in secrets
                        or ref["key"] not in (secrets[ref["name"]].get("stringData") or {})):
                problem("%s: env %s names a missing Secret key" % (role, e["name"]))

        # Kafka users may leave the namespace towards the brokers.
        if role in KAFKA_ROLES:
            egress_ok = False
            for p in own_pols + [p for p in netpols if labels_match(p["spec"].get("podSelector"),
                                                                    labels)]:
                for rule in p["spec"].get("egress") or []:
                    peers = rule.get("to") or []
                    if any("namespaceSelector" in peer or "ipBlock" in peer for peer in peers):
                        egress_ok = True
            if not egress_ok:
                problem("%s: no NetworkPolicy lets it reach Kafka outside the namespace" % role)

    # Services select existing pods and reach their container ports.
    for s in services:
        sel = s["spec"].get("selector") or {}
        targets = [w for w in workloads
                   if labels_match({"matchLabels": sel}, w["spec"]["template"]["metadata"]["labels"])]
        if len(targets) != 1:
            problem("Service %s selects %d workloads" % (s["metadata"]["name"], len(targets)))
            continue
        c = targets[0]["spec"]["template"]["spec"]["containers"][0]
        for p in s["spec"].get("ports") or []:
            if resolve_port(c, p.get("targetPort", p["port"])) is None:
                problem("Service %s port %s targets no container port" % (s["metadata"]["name"],
                                                                       p.get("name")))

    # Ingress rules: serve is the only pod reachable from any source or from other namespaces
    # (besides scrapes of metrics ports by the monitoring namespace); only trainers and the
    # coordinator reach the shards' ZeroMQ port.
    metrics_ports = {int(conf[r][p]) for r, p in ROLES_WITH_HTTP.items()
                     if r in conf and conf[r] and r != PUBLIC_ROLE}
    for p in netpols:
        for rule in p["spec"].get("ingress") or []:
            peers = rule.get("from")
            external = not peers or any("ipBlock" in x or ("namespaceSelector" in x
                                                            and "podSelector" not in x)
                                         for x in peers)
            if not external:
                continue
            ports = {x.get("port") for x in rule.get("ports") or []}
            selected = {r for r, w in roles.items()
                        if labels_match(p["spec"].get("podSelector") or {},
                                        w["spec"]["template"]["metadata"]["labels"])}
            if selected <= {PUBLIC_ROLE}:
                continue
            if peers and rule.get("ports") and ports <= metrics_ports:
                continue  # Prometheus scraping the metrics ports only
            problem("NetworkPolicy %s opens ports %s of %s beyond the namespace"
                 % (p["metadata"]["name"], sorted(ports, key=str) or "all",
                    sorted(selected - {PUBLIC_ROLE})))
    if "pserver" in roles and conf.get("pserver"):
        ps_labels = roles["pserver"]["spec"]["template"]["metadata"]["labels"]
        ps_port = port_of(conf["pserver"]["pserver.listen"])[1]
        sources = set()
        for p in netpols:
            if not p["spec"].get("podSelector") or not labels_match(p["spec"]["podSelector"],
                                                                    ps_labels):
                continue
            for rule in p["spec"].get("ingress") or []:
                ports = {x.get("port") for x in rule.get("ports") or []}
                if rule.get("ports") and ps_port not in ports and "zmq" not in ports:
                    continue
                for peer in rule.get("from") or [{"any": True}]:
                    if set(peer) != {"podSelector"}:
                        sources.add("outside")
                        continue
                    for r, w in roles.items():
                        if labels_match(peer["podSelector"],
                                        w["spec"]["template"]["metadata"]["labels"]):
                            sources.add(r)
        if sources != {"trainer", "coordinator"}:
            problem("pserver port %d is reachable from %s, want exactly trainer and coordinator"
                 % (ps_port, sorted(sources)))

    # Shards: count, names and ports agree across the StatefulSet, its headless Service and the
    # trainers' and coordinator's shard lists.
    ps, tr, co, sv = (conf.get(r) for r in ("pserver", "trainer", "coordinator", "serve"))
    if ps and tr and co and "pserver" in roles:
        sts = roles["pserver"]
        n = int(ps["pserver.shards"])
        if sts["spec"].get("replicas") != n:
            problem("pserver StatefulSet has %r replicas but pserver.shards = %d"
                 % (sts["spec"].get("replicas"), n))
        svc_name = sts["spec"].get("serviceName")
        headless = [s for s in services if s["metadata"]["name"] == svc_name]
        if not headless or headless[0]["spec"].get("clusterIP") != "None":
            problem("pserver's serviceName %r is not a headless Service" % svc_name)
        listen_port = port_of(ps["pserver.listen"])[1]
        want = ",".join("tcp://%s-%d.%s:%d" % (sts["metadata"]["name"], i, svc_name, listen_port)
                        for i in range(n))
        if tr.get("trainer.shards") != want:
            problem("trainer.shards = %r, want %r" % (tr.get("trainer.shards"), want))
        if co.get("coordinator.shards") != want:
            problem("coordinator.shards = %r, want %r" % (co.get("coordinator.shards"), want))
        c = sts["spec"]["template"]["spec"]["containers"][0]
        if listen_port not in container_ports(c).values():
            problem("pserver.listen port %d is not a container port" % listen_port)
        shard_env = [e for e in c.get("env") or [] if e["name"] == "SPARROW_PSERVER_SHARD"]
        if not shard_env or "pod-index" not in str(shard_env[0].get("valueFrom")):
            problem("pserver: SPARROW_PSERVER_SHARD does not come from the pod index")
        claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates") or []]
        data = mounted(c, ps["pserver.data_dir"])
        if not data or data["name"] not in claims:
            problem("pserver.data_dir is not on a per-shard volumeClaimTemplate")
        co_port = port_of(co["coordinator.listen"])[1]
        cc = roles["coordinator"]["spec"]["template"]["spec"]["containers"][0]
        if co_port not in container_ports(cc).values():
            problem("coordinator.listen port %d is not a container port" % co_port)
        if roles["coordinator"]["spec"].get("replicas") != 1:
            problem("coordinator must have exactly 1 replica")
        if (roles["coordinator"]["spec"].get("strategy") or {}).get("type") != "Recreate":
            problem("coordinator must use the Recreate strategy (never two at once)")

        # One shared checkpoint volume: shards write, the coordinator writes MANIFEST/LATEST,
        # serve reads.
        ckpt = {"pserver": ps.get("pserver.checkpoint.dir") or ps.get("pserver.data_dir"),
                "coordinator": co.get("coordinator.checkpoint.dir"),
                "serve": (sv or {}).get("serve.checkpoint.dir")}
        if len(set(ckpt.values())) != 1:
            problem("checkpoint directories differ: %s" % ckpt)
        claim_names = set()
        for r, path in ckpt.items():
            c = roles[r]["spec"]["template"]["spec"]["containers"][0]
            m = mounted(c, path or "")
            vols = {v["name"]: v for v in roles[r]["spec"]["template"]["spec"].get("volumes") or []}
            v = vols.get(m["name"]) if m else None
            if not v or "persistentVolumeClaim" not in v:
                problem("%s: checkpoint directory %s is not on the shared PVC" % (r, path))
                continue
            claim_names.add(v["persistentVolumeClaim"]["claimName"])
            if r == "serve" and not m.get("readOnly"):
                problem("serve mounts the checkpoints read-write")
        if len(claim_names) != 1:
            problem("checkpoint PVCs differ: %s" % claim_names)
        else:
            pvc = pvcs.get(claim_names.pop())
            if pvc and "ReadWriteMany" not in pvc["spec"].get("accessModes", []):
                problem("the checkpoint PVC is not ReadWriteMany")

    # serve: Service + HPA.
    if "serve" in roles:
        hpas = [h for h in by_kind.get("HorizontalPodAutoscaler", [])
                if h["spec"]["scaleTargetRef"]["name"] == "serve"
                and h["spec"]["scaleTargetRef"]["kind"] == "Deployment"]
        if not hpas:
            problem("serve has no HorizontalPodAutoscaler")
        if not [s for s in services if (s["spec"].get("selector") or {}).get(
                "app.kubernetes.io/component") == "serve"]:
            problem("serve has no Service")

    # Overlays: GPU trainers and CPU trainers.
    if tr and "trainer" in roles:
        c = roles["trainer"]["spec"]["template"]["spec"]["containers"][0]
        gpus = str(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", ""))
        if overlay == "gpu":
            if tr.get("trainer.backend") != "cuda":
                problem("gpu overlay: trainer.backend = %r, want cuda" % tr.get("trainer.backend"))
            if gpus != "1":
                problem("gpu overlay: trainers do not request nvidia.com/gpu: 1")
            if not c["image"].endswith("-cuda"):
                problem("gpu overlay: trainer image %s is not the CUDA image" % c["image"])
        else:
            if tr.get("trainer.backend") != "cpu" or gpus:
                problem("%s overlay: trainers must use the CPU backend and no GPU" % overlay)
        for r, w in roles.items():
            for cc in w["spec"]["template"]["spec"]["containers"]:
                if cc["image"] in ("sparrow", "sparrow-cuda") or ":" not in cc["image"]:
                    problem("%s: image %s is not pinned by the overlay" % (r, cc["image"]))
                if r != "trainer" and "nvidia.com/gpu" in str(cc.get("resources")):
                    problem("%s: requests a GPU" % r)

    for e in errors:
        print("deploy_check[%s]: %s" % (overlay, e))
    if not errors:
        print("deploy_check[%s]: %d workloads, %d NetworkPolicies, %d PDBs: all rules hold"
              % (overlay, len(workloads), len(netpols), len(pdbs)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
