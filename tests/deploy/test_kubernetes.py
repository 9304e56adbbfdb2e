#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes/ as a cluster would take it: every manifest parses, and what weightd's
deployment depends on holds. The socket's directory is a hostPath that the DaemonSet and the
engines mount at the path of the configured socket; no pod asks for hostIPC (the fds travel over
the socket); segments lie in segment_dir on a hostPath (the node's tmpfs) and the state index on
another, so both outlive the pod; the image is the one scripts/image builds, its registry a
kustomize images: entry; the Secret is mounted with mode 0400 and reaches weightd as a 0400 copy
of its own user; memory limits leave room for the budget; probes ask `weightctl health`; the
admin socket's directory is a hostPath only weightd's pod mounts; the metrics port is declared,
annotated for scraping and selected by monitoring/podmonitor.yaml; the Grafana dashboard asks
only for series weightd exports; and the ConfigMap's weightd.conf passes `weightd
--check-config`.

Usage: test_kubernetes.py DEPLOY_DIR (WD_WEIGHTD names the weightd binary)."""
import configparser
import json
import os
import posixpath
import re
import subprocess
import sys
import tempfile

import yaml

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def quantity(q):
    """A Kubernetes memory quantity (Gi, Mi, G, ...) in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?", str(q))
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    mult = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "K": 10**3,
            "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return int(m.group(1)) * mult


def conf_size(v):
    """A weightd.conf size (powers of 1024) in bytes."""
    m = re.fullmatch(r"(\d+)([KMGTP])?", v.strip())
    return int(m.group(1)) << (10 * " KMGTP".index(m.group(2) or " "))


def load(d):
    docs = {}
    for n in sorted(os.listdir(d)):
        if not n.endswith(".yaml"):
            continue
        with open(os.path.join(d, n)) as f:
            try:
                parsed = [x for x in yaml.safe_load_all(f) if x is not None]
            except yaml.YAMLError as e:
                check(False, f"{n} does not parse: {e}")
                continue
        for doc in parsed:
            check(isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc, f"{n}: "
                  "every document has apiVersion and kind")
        docs[n] = parsed
    return docs


def find(docs, kind, name=None):
    for ds in docs.values():
        for d in ds:
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name):
                return d
    return None


def pod_specs(docs):
    for n, ds in docs.items():
        for d in ds:
            spec = d.get("spec", {})
            if d["kind"] == "Pod":
                yield n, d["metadata"]["name"], spec
            elif "template" in spec:
                yield n, d["metadata"]["name"], spec["template"]["spec"]


def mounts_of(container, volumes):
    """(volume dict, mount dict) for each of a container's mounts."""
    for m in container.get("volumeMounts", []):
        yield volumes[m["name"]], m


def main():
    d = sys.argv[1]
    docs = load(d)
    kust = find(docs, "Kustomization")
    check(kust is not None, "kustomization.yaml is a Kustomization")
    if kust:
        listed = set(kust.get("resources", []))
        for n in docs:
            if n not in ("kustomization.yaml", "engine.yaml"):
                check(n in listed, f"kustomization.yaml lists {n}")
        for n in listed:
            check(n in docs, f"kustomization.yaml's {n} exists")

    for n, name, spec in pod_specs(docs):
        for key in ("hostIPC", "hostPID", "hostNetwork"):
            check(not spec.get(key, False), f"{n}: {name} does not set {key}")

    ds = find(docs, "DaemonSet", "weightd")
    cm = find(docs, "ConfigMap", "weightd-config")
    secret = find(docs, "Secret")
    check(ds is not None and cm is not None and secret is not None,
          "a DaemonSet weightd, a ConfigMap weightd-config and a Secret")
    if not (ds and cm and secret):
        return
    text = cm["data"]["weightd.conf"]
    conf = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    conf.read_string(text)
    socket = conf["daemon"]["socket"]
    sockdir = posixpath.dirname(socket)
    admin_socket = conf["daemon"].get("admin_socket", "/run/weightd-admin/weightd.sock")
    admindir = posixpath.dirname(admin_socket)
    check(conf["daemon"].get("single_socket", "no") == "no" and admindir != sockdir,
          "the admin socket lies in a directory of its own")
    spec = ds["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    wd = next(c for c in spec["containers"] if c["name"] == "weightd")
    sc = wd["securityContext"]
    check(sc.get("runAsNonRoot") and sc.get("runAsUser", 0) != 0, "weightd runs as a non-root uid")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "weightd drops every capability")

    # the image: the one scripts/image builds (weightd:<version of debian/changelog>), its
    # registry named by kustomization.yaml's images: entry, never in the manifests
    src = os.path.dirname(os.path.dirname(os.path.abspath(d)))
    with open(os.path.join(src, "debian", "changelog")) as f:
        version = re.match(r"weightd \(([^)]+)\)", f.readline()).group(1)
    for c in spec.get("initContainers", []) + spec["containers"]:
        check(c["image"] == f"weightd:{version}",
              f"{c['name']} runs weightd:{version}, the image scripts/image builds")
    imgs = {i["name"]: i for i in (kust or {}).get("images", [])}
    check("weightd" in imgs and "/" in imgs["weightd"].get("newName", "") and
          imgs["weightd"].get("newTag") == version,
          f"kustomization.yaml's images: gives weightd a registry and the tag {version}")

    # the socket's directory, the segments and the state index: hostPaths, so that all three
    # outlive the pod; the socket's at the configured socket's directory
    on_host = {m["mountPath"]: v for v, m in mounts_of(wd, vols) if "hostPath" in v}
    segdir = conf["daemon"].get("segment_dir", "")
    statedir = conf["daemon"].get("state_dir", "")
    check(set(on_host) == {sockdir, admindir, segdir, statedir},
          f"weightd's hostPaths are the sockets' directories, segment_dir and state_dir "
          f"({sorted(on_host)})")
    host_admindir = on_host.get(admindir, {}).get("hostPath", {}).get("path")
    host_sockdir = on_host.get(sockdir, {}).get("hostPath", {}).get("path")
    seg = on_host.get(segdir, {}).get("hostPath", {})
    check(seg.get("type") == "Directory", "the segments' hostPath must exist (the node mounts "
          "its tmpfs there): type Directory, never created empty on the node's disk")
    check(not any(m["mountPath"].startswith("/dev/shm") for m in wd["volumeMounts"]),
          "weightd keeps no segments in the pod's /dev/shm (a new pod would start empty)")
    ds_text = open(os.path.join(d, "daemonset.yaml")).read()
    check("huge=within_size" in ds_text and seg.get("path", "?") in ds_text.split("mount -t")[-1],
          "daemonset.yaml says how the node mounts the segments' tmpfs (huge=within_size)")
    init_script = " ".join(" ".join(c.get("command", []) + c.get("args", []))
                           for c in spec.get("initContainers", []))
    for p in (sockdir, admindir, segdir, statedir):
        check(re.search(rf"install -d -o {sc['runAsUser']} -g \d+ -m 07[05]0 [^&]*{re.escape(p)}",
                        init_script), f"the init container gives {p} to weightd's uid")

    # the engines: only that directory, nothing of /dev/shm
    engine_specs = [(n, name, s) for n, name, s in pod_specs(docs) if n == "engine.yaml"]
    check(engine_specs, "engine.yaml holds an engine's pod")
    for n, name, s in engine_specs:
        evols = {v["name"]: v for v in s.get("volumes", [])}
        check(all("hostPath" in v and v["hostPath"]["path"] == host_sockdir for v in evols.values()),
              f"{n}: {name}'s only volume is the socket's directory on the host")
        for c in s["containers"]:
            ms = list(mounts_of(c, evols))
            check(len(ms) == 1 and ms[0][1]["mountPath"] == sockdir,
                  f"{n}: {c['name']} mounts the socket's directory at {sockdir}, and nothing else")
            check(len(ms) == 1 and ms[0][1].get("readOnly"),
                  f"{n}: {c['name']} mounts the socket's directory read-only (it cannot replace "
                  f"the socket or change its group)")
            check(all(not m["mountPath"].startswith("/dev/shm") for _, m in ms),
                  f"{n}: {c['name']} does not mount /dev/shm")
        check(all(v.get("hostPath", {}).get("path") != host_admindir for v in evols.values()),
              f"{n}: {name} does not mount the admin socket's directory")
        groups = s.get("securityContext", {}).get("supplementalGroups", [])
        check(conf["daemon"].get("socket_group", "") in [str(g) for g in groups],
              f"{n}: {name} is in the socket's group")

    # the secret: mounted with mode 0400, and reaching weightd only as its own 0400 copy
    sec_vols = [v for v in spec["volumes"] if "secret" in v]
    check(len(sec_vols) == 1 and sec_vols[0]["secret"]["secretName"] == secret["metadata"]["name"],
          "the DaemonSet mounts the Secret")
    for v in sec_vols:
        check(v["secret"].get("defaultMode") == 0o400, "the Secret's files have mode 0400")
        check(all(m["name"] != v["name"] for m in wd.get("volumeMounts", [])),
              "weightd does not read the Secret's root-owned files directly")
    creds = [s.get("credentials_file") for n, s in conf.items() if n.startswith("checkpoint:")]
    creds = [c for c in creds if c]
    check(creds, "a checkpoint names a credentials_file")
    init = spec.get("initContainers", [])
    script = " ".join(" ".join(c.get("command", []) + c.get("args", [])) for c in init)
    for c in creds:
        check(re.search(rf"install -o {sc['runAsUser']} -g \d+ -m 0400 \S+ {re.escape(c)}", script),
              f"an init container copies {c} for uid {sc['runAsUser']} with mode 0400")
        mount = [m for _, m in mounts_of(wd, vols) if c.startswith(m["mountPath"] + "/")]
        check(mount and mount[0].get("readOnly"), f"weightd mounts {c}'s directory read-only")
        check(mount and vols[mount[0]["name"]].get("emptyDir", {}).get("medium") == "Memory",
              f"{c} is on a memory-backed volume (never on the node's disk)")

    # memory: the pod pays for every weight (daemonset.yaml's comment says why)
    budget = conf_size(conf["daemon"]["budget"])
    res = wd.get("resources", {})
    for kind in ("requests", "limits"):
        check("cpu" in res.get(kind, {}) and "memory" in res.get(kind, {}),
              f"weightd has cpu and memory {kind}")
    if "memory" in res.get("limits", {}):
        check(quantity(res["limits"]["memory"]) > budget, "weightd's memory limit exceeds the budget")
        check(res["limits"]["memory"] == res["requests"].get("memory"),
              "weightd's memory request equals its limit (a Guaranteed pod, evicted last)")
    m = re.search(r"mount -t tmpfs -o \S*size=(\d+[KMGT]?)", ds_text)
    check(m and conf_size(m.group(1)) >= budget, "the node's tmpfs (size=) holds the budget")
    for probe, kind in (("startupProbe", "--live"), ("livenessProbe", "--live"),
                        ("readinessProbe", "--ready")):
        cmd = wd.get(probe, {}).get("exec", {}).get("command", [])
        check(cmd and posixpath.basename(cmd[0]) == "weightctl" and
              (socket in cmd or admin_socket in cmd) and "health" in cmd and kind in cmd,
              f"weightd's {probe} asks weightctl health {kind}")

    # metrics: where Prometheus is (the pod's IP, with the opt-in), the port declared and
    # annotated, and the PodMonitor selecting it by name
    listen = conf["daemon"].get("metrics_listen", "")
    port = int(listen.rsplit(":", 1)[1]) if listen else 0
    check(listen and not listen.startswith(("127.", "[::1]", "localhost")) and
          conf["daemon"].get("metrics_public") == "yes",
          "metrics_listen serves the pod's address, with metrics_public = yes")
    ports = {p.get("name"): p for p in wd.get("ports", [])}
    check(ports.get("metrics", {}).get("containerPort") == port,
          f"weightd declares its metrics port {port}, named metrics")
    ann = ds["spec"]["template"]["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == str(port)
          and ann.get("prometheus.io/path") == "/metrics", "the pod carries the scrape annotations")
    pm_path = os.path.join(d, "monitoring", "podmonitor.yaml")
    with open(pm_path) as f:
        pm = yaml.safe_load(f)
    check(pm.get("kind") == "PodMonitor" and pm["spec"]["selector"]["matchLabels"].items() <=
          ds["spec"]["template"]["metadata"]["labels"].items(),
          "monitoring/podmonitor.yaml selects weightd's pods")
    check(any(e.get("port") == "metrics" and e.get("path", "/metrics") == "/metrics"
              for e in pm["spec"].get("podMetricsEndpoints", [])),
          "monitoring/podmonitor.yaml scrapes the port named metrics")

    # the dashboard asks for series weightd exports (daemon/metrics.c names each family)
    with open(os.path.join(src, "daemon", "metrics.c")) as f:
        families = set(re.findall(r'"([a-z_]+)", "(?:gauge|counter)"', f.read()))
    families |= {"info", "uptime_seconds", "materialization_seconds_total"}
    with open(os.path.join(src, "deploy", "grafana", "weightd.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(exprs, "the Grafana dashboard has queries")
    for e in exprs:
        for name in re.findall(r"\bweightd_([a-z_]+)", e):
            check(name in families, f"the dashboard's weightd_{name} is a series weightd exports")
    # so do the example alert rules of docs/operating.md, which parse as a rules file
    with open(os.path.join(src, "docs", "operating.md")) as f:
        ops = f.read()
    m = re.search(r"## Monitoring and alerting.*?```yaml\n(.*?)```", ops, re.S)
    check(m, "docs/operating.md has example alert rules")
    rules = yaml.safe_load(m.group(1))["groups"][0]["rules"] if m else []
    alerts = {r.get("alert") for r in rules}
    check({"WeightdCheckpointFailed", "WeightdBudgetNearlyFull", "WeightdRefusals"} <= alerts,
          "the example rules alert on a failed checkpoint, a nearly full budget and refusals")
    for r in rules:
        check(r.get("expr"), f"rule {r.get('alert')} has an expression")
        for name in re.findall(r"\bweightd_([a-z_]+)", r.get("expr", "")):
            check(name in families, f"rule {r.get('alert')}'s weightd_{name} is exported")

    # the configuration itself, as weightd reads it, with the Secret's file where the init
    # container puts it (here: a temp dir, the credentials_file lines pointed at it) and the
    # segments in /dev/shm
    weightd = os.environ.get("WD_WEIGHTD")
    check(weightd, "WD_WEIGHTD names weightd")
    if weightd:
        with tempfile.TemporaryDirectory() as tmp:
            for c in set(creds):
                key = posixpath.basename(c)
                check(key in secret.get("stringData", {}), f"the Secret holds {key}")
                local = os.path.join(tmp, key)
                with open(os.open(local, os.O_WRONLY | os.O_CREAT, 0o400), "w") as f:
                    f.write(secret.get("stringData", {}).get(key, ""))
                text = re.sub(rf"(?m)^(credentials_file\s*=\s*){re.escape(c)}\s*$",
                              lambda m: m.group(1) + local, text)
            # the node's tmpfs is not on this machine: /dev/shm (a tmpfs) stands for it
            text = re.sub(r"(?m)^(segment_dir\s*=).*$", r"\1", text)
            conf_path = os.path.join(tmp, "weightd.conf")
            with open(conf_path, "w") as f:
                f.write(text)
            r = subprocess.run([weightd, "--check-config", "--config", conf_path],
                               capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "weightd --check-config accepts the ConfigMap's weightd.conf: "
              + (r.stdout + r.stderr).strip())


if __name__ == "__main__":
    main()
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
