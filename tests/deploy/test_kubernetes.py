#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes/ as a cluster would take it: every manifest parses, and what weightd's
deployment depends on holds. The socket's directory is a hostPath that the DaemonSet and the
engines mount at the path of the configured socket; no pod asks for hostIPC (the fds travel over
the socket); the Secret is mounted with mode 0400 and reaches weightd as a 0400 copy of its own
user; memory limits leave room for the budget; probes ask weightctl; and the ConfigMap's
weightd.conf passes `weightd --check-config`.

Usage: test_kubernetes.py DEPLOY_DIR (WD_WEIGHTD names the weightd binary)."""
import configparser
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
    spec = ds["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    wd = next(c for c in spec["containers"] if c["name"] == "weightd")
    sc = wd["securityContext"]
    check(sc.get("runAsNonRoot") and sc.get("runAsUser", 0) != 0, "weightd runs as a non-root uid")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "weightd drops every capability")

    # the socket's directory: a hostPath, in weightd at the configured socket's directory
    on_host = [(v, m) for v, m in mounts_of(wd, vols) if "hostPath" in v]
    check(len(on_host) == 1, "weightd mounts exactly one hostPath (the socket's directory)")
    for v, m in on_host:
        check(m["mountPath"] == sockdir, f"the hostPath is mounted at {sockdir}, where the socket is")
        host_sockdir = v["hostPath"]["path"]

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
            check(all(not m["mountPath"].startswith("/dev/shm") for _, m in ms),
                  f"{n}: {c['name']} does not mount /dev/shm")
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
    shm = [vols[m["name"]] for m in wd["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    check(shm and shm[0].get("emptyDir", {}).get("medium") == "Memory",
          "/dev/shm is a memory-backed emptyDir")
    if shm and "sizeLimit" in shm[0].get("emptyDir", {}):
        check(quantity(shm[0]["emptyDir"]["sizeLimit"]) >= budget, "/dev/shm holds the budget")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        cmd = wd.get(probe, {}).get("exec", {}).get("command", [])
        check(cmd and posixpath.basename(cmd[0]) == "weightctl" and socket in cmd and
              ("metrics" in cmd or "status" in cmd), f"weightd's {probe} asks weightctl")
    check(any(m["mountPath"] == posixpath.dirname(conf["daemon"]["state_dir"])
              for m in wd["volumeMounts"]), "the state index lies on a volume of the pod")

    # the configuration itself, as weightd reads it, with the Secret's file where the init
    # container puts it (here: a temp dir, the credentials_file lines pointed at it)
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
