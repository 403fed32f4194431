#!/usr/bin/env python3
"""Checks deploy/monitoring against the rest of the repository.

usage: monitoring_check.py static RENDERED_OVERLAY.yaml RENDERED_MONITORING.yaml SCRATCH_DIR
       monitoring_check.py refs
       monitoring_check.py scraped METRICS_FILE...

static: every alert of alerts.yaml is named in docs/OPERATIONS.md's Monitoring table and every
rule the table names is in alerts.yaml; every dashboard panel queries the ${datasource} variable
and its expressions pass promtool (as recording rules, $__rate_interval read as 5m); ids are
unique; the PodMonitor selects every workload of the rendered overlay, in its namespace, on a
container port that is the pod's scrape port.
refs: prints every metric the rules and the dashboard name (sparrow_*, process_*), one per line,
with the label matchers (=) that name a series: `name label=value ...`.
scraped: checks refs against the expositions (one file per role's /metrics): every name has a
sample, and every label matcher a sample with that label value (target labels, added by the
scrape, are not checked). Exits 1 with one line per problem.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MON = os.path.join(ROOT, "deploy", "monitoring")
RULES = os.path.join(MON, "alerts.yaml")
DASHBOARD = os.path.join(MON, "sparrow-dashboard.json")
OPERATIONS = os.path.join(ROOT, "docs", "OPERATIONS.md")
# Labels the scrape adds (PodMonitor relabelling, Prometheus), not the roles.
TARGET_LABELS = {"component", "instance", "job", "namespace", "pod", "container", "endpoint"}
NAME = re.compile(r"\b((?:sparrow|process)_[A-Za-z0-9_]*)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')

errors = []


def problem(msg):
    errors.append(msg)


def load_rules():
    import yaml
    return yaml.safe_load(open(RULES))


def rule_exprs():
    for g in load_rules()["groups"]:
        for r in g["rules"]:
            yield "rule %s" % (r.get("alert") or r.get("record")), r["expr"]


def dashboard_panels():
    dash = json.load(open(DASHBOARD))
    for p in dash["panels"]:
        yield p
        for sub in p.get("panels") or []:
            yield sub


def dashboard_exprs():
    for p in dashboard_panels():
        for t in p.get("targets") or []:
            yield "panel %r" % p.get("title"), t.get("expr", "")


def refs():
    """(name, {label: value}) for every metric the rules and the dashboard name."""
    out = set()
    for _, expr in list(rule_exprs()) + list(dashboard_exprs()):
        for m in NAME.finditer(expr):
            labels = []
            for lm in MATCHER.finditer(m.group(2) or ""):
                if lm.group(2) == "=" and lm.group(1) not in TARGET_LABELS:
                    labels.append((lm.group(1), lm.group(3)))
            out.add((m.group(1), tuple(sorted(labels))))
    return sorted(out)


def parse_exposition(text):
    """{name: [labels dict, ...]} of every sample line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            continue
        labels = dict((k, v) for k, v in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                                     m.group(3) or ""))
        samples.setdefault(m.group(1), []).append(labels)
    return samples


def cmd_scraped(files):
    samples = {}
    for f in files:
        for name, ls in parse_exposition(open(f).read()).items():
            samples.setdefault(name, []).extend(ls)
    n = 0
    for name, labels in refs():
        n += 1
        if name not in samples:
            problem("%s: no role exposes it" % name)
            continue
        for k, v in labels:
            if not any(s.get(k) == v for s in samples[name]):
                problem('%s{%s="%s"}: no such series (values of %s: %s)'
                        % (name, k, v, k, sorted({s.get(k) for s in samples[name]} - {None})))
    if not errors:
        print("monitoring_check: all %d metric references of the rules and the dashboard exist"
              % n)


def operations_rules():
    """Alert names of the Rule column of the Monitoring section's alert table (the table whose
    header has a Rule column)."""
    text = open(OPERATIONS).read()
    sec = text.split("\n## Monitoring", 1)[1].split("\n## ", 1)[0]
    names, header, tables = [], None, 0
    for line in sec.splitlines() + [""]:
        if not line.startswith("|"):
            header = None  # a table ends at the first line that is not a row
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables += "Rule" in header
            continue
        if set(line) <= set("|-: ") or "Rule" not in header:
            continue
        if len(cells) != len(header):
            problem("OPERATIONS.md Monitoring row with %d cells, not %d: %s"
                    % (len(cells), len(header), cells[0]))
            continue
        found = re.findall(r"`(Sparrow[A-Za-z]+)`", cells[header.index("Rule")])
        if not found:
            problem("OPERATIONS.md Monitoring row without a rule: %s" % cells[0])
        names += found
    if tables != 1:
        problem("OPERATIONS.md Monitoring: want one table with a Rule column, found %d" % tables)
    return names


def cmd_static(overlay_path, monitoring_path, scratch):
    import yaml
    # 1. The alert table and alerts.yaml name the same rules.
    alerts = [r["alert"] for g in load_rules()["groups"] for r in g["rules"] if "alert" in r]
    if len(set(alerts)) != len(alerts):
        problem("alerts.yaml: duplicate alert names")
    table = operations_rules()
    for a in sorted(set(alerts) - set(table)):
        problem("alert %s is not in docs/OPERATIONS.md's Monitoring table" % a)
    for a in sorted(set(table) - set(alerts)):
        problem("docs/OPERATIONS.md names rule %s, which alerts.yaml lacks" % a)
    for g in load_rules()["groups"]:
        for r in g["rules"]:
            if "alert" in r and (r.get("labels") or {}).get("severity") not in ("page", "warning",
                                                                                "info"):
                problem("alert %s: severity must be page, warning or info" % r["alert"])
            if "alert" in r and not (r.get("annotations") or {}).get("summary"):
                problem("alert %s: no summary" % r["alert"])

    # 2. The dashboard: ids, datasource, and every expression through promtool.
    ids = [p.get("id") for p in dashboard_panels()]
    if len(set(ids)) != len(ids):
        problem("dashboard: panel ids are not unique")
    rec = []
    for p in dashboard_panels():
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            problem("panel %r: datasource is not ${datasource}" % p.get("title"))
        if not p.get("targets"):
            problem("panel %r: no query" % p.get("title"))
        g = p.get("gridPos") or {}
        if g.get("x", 0) + g.get("w", 0) > 24:
            problem("panel %r: wider than the grid" % p.get("title"))
        for t in p.get("targets") or []:
            rec.append({"record": "sparrow:dashboard:%d_%s" % (p["id"], t["refId"]),
                        "expr": t["expr"].replace("$__rate_interval", "5m")})
    path = os.path.join(scratch, "dashboard-rules.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rec}]}, f)
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    if r.returncode != 0:
        problem("dashboard expressions fail promtool:\n" + r.stdout + r.stderr)

    # 3. The PodMonitor scrapes every workload of the overlay on its scrape port.
    docs = [d for d in yaml.safe_load_all(open(overlay_path)) if d]
    mon = [d for d in yaml.safe_load_all(open(monitoring_path)) if d]
    pms = [d for d in mon if d["kind"] == "PodMonitor"]
    if len(pms) != 1:
        problem("want one PodMonitor, got %d" % len(pms))
        return
    pm = pms[0]
    ns = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    if pm["spec"].get("namespaceSelector", {}).get("matchNames") != ns:
        problem("PodMonitor namespaceSelector %s, the workloads are in %s"
                % (pm["spec"].get("namespaceSelector"), ns))
    if pm["metadata"].get("namespace") not in ns:
        problem("PodMonitor is not in the workloads' namespace %s" % ns)
    sel = pm["spec"]["selector"].get("matchLabels") or {}
    endpoints = pm["spec"].get("podMetricsEndpoints") or []
    for w in docs:
        if w["kind"] not in ("Deployment", "StatefulSet"):
            continue
        tmpl = w["spec"]["template"]
        labels = tmpl["metadata"].get("labels") or {}
        name = w["metadata"]["name"]
        if any(labels.get(k) != v for k, v in sel.items()):
            problem("PodMonitor does not select %s (labels %s)" % (name, labels))
        port = (tmpl["metadata"].get("annotations") or {}).get("prometheus.io/port")
        c = tmpl["spec"]["containers"][0]
        by_name = {p.get("name"): str(p["containerPort"]) for p in c.get("ports") or []}
        for ep in endpoints:
            if by_name.get(ep.get("port")) != port:
                problem("%s: PodMonitor port %r is container port %s, the scrape port is %s"
                        % (name, ep.get("port"), by_name.get(ep.get("port")), port))
            if ep.get("path") != "/metrics":
                problem("PodMonitor path %r is not /metrics" % ep.get("path"))
    relabel = [r for ep in endpoints for r in ep.get("relabelings") or []
               if r.get("targetLabel") == "component"]
    if not relabel or relabel[0].get("sourceLabels") != [
            "__meta_kubernetes_pod_label_app_kubernetes_io_component"]:
        problem("PodMonitor does not set the component label the rules and the dashboard use")
    dash_cms = [d for d in mon if d["kind"] == "ConfigMap"]
    if not dash_cms or json.loads(dash_cms[0]["data"]["sparrow-dashboard.json"]) != json.load(
            open(DASHBOARD)):
        problem("the dashboard ConfigMap does not hold sparrow-dashboard.json")
    elif (dash_cms[0]["metadata"].get("labels") or {}).get("grafana_dashboard") != "1":
        problem("the dashboard ConfigMap lacks the grafana_dashboard label")
    if not errors:
        print("monitoring_check: %d alerts match OPERATIONS.md; %d dashboard queries pass "
              "promtool; the PodMonitor scrapes every workload" % (len(alerts), len(rec)))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "refs":
        for name, labels in refs():
            print(" ".join([name] + ["%s=%s" % kv for kv in labels]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "scraped":
        cmd_scraped(sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "static":
        cmd_static(*sys.argv[2:])
    else:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    for e in errors:
        print("monitoring_check: %s" % e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
