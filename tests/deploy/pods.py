# SPDX-License-Identifier: Apache-2.0
"""Pods of deploy/kubernetes played by podman, for tests/deploy/test_pods.py and
tests/deploy/bench_cluster.py.

Kubernetes cannot run on the test machines, but its pod model can: `podman kube play` plays a Pod
with hostPath volumes, memory limits, users and an IPC namespace of its own. The weightd Pod is
rendered from the DaemonSet's pod template (daemonset.yaml) and the engine Pods from engine.yaml's
Deployment template, never written by hand. What a render changes, and only that:

- each hostPath's node directory becomes one of the test's own (a private socket directory,
  segments tmpfs and state directory), so a weightd of the machine is never touched;
- the ConfigMap and Secret volumes become hostPaths holding the same files as the kubelet would
  project them (weightd.conf 0644; the Secret's file root's, mode 0400 as defaultMode says), since
  podman has no API server to take them from; memory-backed emptyDirs become private tmpfs
  directories;
- the image becomes the one scripts/image built; engines get the test's command and user.

Callers also name the few fields a case changes (a memory limit, hostNetwork to reach the test's
S3 server on the host's loopback). Every pod and directory made here is removed by cleanup().
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(SRC, "deploy", "kubernetes")
CONF = """[containers]
default_ulimits = ["nofile={n}:{n}", "nproc={p}:{p}"]
[engine]
runtime = "runc"
"""


def version():
    with open(os.path.join(SRC, "debian", "changelog")) as f:
        return re.match(r"weightd \(([^)]+)\)", f.readline()).group(1)


def podman_env(workdir):
    """CONTAINERS_CONF for these machines: runc (crun refuses the hybrid cgroup layout) and
    ulimits root may set without CAP_SYS_RESOURCE (files and processes: 32768, or this
    process's hard limit if lower)."""
    import resource
    if not os.environ.get("CONTAINERS_CONF"):
        path = os.path.join(workdir, "containers.conf")
        def cap(what):
            hard = resource.getrlimit(what)[1]
            return 32768 if hard == resource.RLIM_INFINITY else min(32768, hard)
        with open(path, "w") as f:
            f.write(CONF.format(n=cap(resource.RLIMIT_NOFILE), p=cap(resource.RLIMIT_NPROC)))
        os.environ["CONTAINERS_CONF"] = path


def podman(*args, check=True, timeout=120, capture=True):
    r = subprocess.run(["podman", *args], capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {r.returncode}: {r.stderr.strip()}")
    return r.stdout if capture else None


def why_podman_cannot_run(image):
    """None when podman can run a container of image here, else why not."""
    import shutil as sh
    for tool in ("podman", "runc"):
        if not sh.which(tool):
            return f"{tool} is not installed (scripts/deps installs it)"
    if os.geteuid() != 0:
        return "the pod tests need root (hostPath volumes, a tmpfs mount, cgroup files)"
    try:
        r = subprocess.run(["podman", "run", "--rm", "--network", "none", image, "true"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"podman run failed: {e}"
    if r.returncode != 0:
        return f"podman run {image} true failed: {r.stderr.strip()[-400:]}"
    return None


def load_yaml(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def daemonset():
    return next(d for d in load_yaml("daemonset.yaml") if d["kind"] == "DaemonSet")


def configmap_conf():
    cm = next(d for d in load_yaml("configmap.yaml") if d["kind"] == "ConfigMap")
    return cm["data"]["weightd.conf"]


def engine_template():
    return next(d for d in load_yaml("engine.yaml") if d["kind"] == "Deployment")


class Node:
    """The test's node: private host directories standing for the node's, pods played on them."""

    def __init__(self, image, tag):
        self.image = image
        self.tag = tag  # a prefix of every pod's name, so leftovers are recognisable
        self.root = tempfile.mkdtemp(prefix=f"wd-pods-{tag}-")
        os.chmod(self.root, 0o755)
        self.mounts = []
        self.pods = []

    def path(self, *p):
        return os.path.join(self.root, *p)

    def dir(self, *p, mode=0o755, owner=None):
        d = self.path(*p)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, mode)
        if owner is not None:
            os.chown(d, owner, owner)
        return d

    def tmpfs(self, name, opts):
        d = self.dir(name)
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, f"wd-{self.tag}-{name}", d],
                       check=True)
        self.mounts.append(d)
        return d

    def write(self, rel, text, mode=0o644, owner=0, group=0):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chown(p, owner, group)
        os.chmod(p, mode)
        return p

    # --- rendering -------------------------------------------------------------------------

    def weightd_pod(self, name, conf_dir, secret_dir, host_paths, extra_mounts=(),
                    host_network=False, restart="Always", edit=None):
        """The DaemonSet's pod template as the Pod a node would run. host_paths maps each of the
        template's hostPath paths to the test's directory; conf_dir holds weightd.conf (the
        ConfigMap's), secret_dir the Secret's files; extra_mounts are (host dir, path) pairs
        mounted read-only into weightd (the test's local checkpoints)."""
        ds = daemonset()
        tmpl = copy.deepcopy(ds["spec"]["template"])
        spec = tmpl["spec"]
        for v in spec["volumes"]:
            if "hostPath" in v:
                v["hostPath"]["path"] = host_paths[v["hostPath"]["path"]]
            elif "configMap" in v:
                v.pop("configMap")
                v["hostPath"] = {"path": conf_dir, "type": "Directory"}
            elif "secret" in v:
                v.pop("secret")
                v["hostPath"] = {"path": secret_dir, "type": "Directory"}
            elif v.get("emptyDir", {}).get("medium") == "Memory":
                v.pop("emptyDir")
                d = self.dir(f"{name}-{v['name']}")
                if not os.path.ismount(d):
                    self.tmpfs(f"{name}-{v['name']}", "size=1m,mode=0755")
                v["hostPath"] = {"path": d, "type": "Directory"}
        for i, (host, path) in enumerate(extra_mounts):
            spec["volumes"].append({"name": f"extra{i}", "hostPath": {"path": host,
                                                                      "type": "Directory"}})
            spec["containers"][0]["volumeMounts"].append(
                {"name": f"extra{i}", "mountPath": path, "readOnly": True})
        for c in spec.get("initContainers", []) + spec["containers"]:
            c["image"] = self.image
        # A DaemonSet's pods restart their containers always. podman 4.3 would restart the init
        # container after its success too (and then fail to remove it), so the Pod says
        # OnFailure: weightd killed by a signal exits non-zero and is restarted as under Always.
        # podman has no priority classes.
        spec["restartPolicy"] = "OnFailure" if restart == "Always" else restart
        spec.pop("priorityClassName", None)
        if host_network:
            spec["hostNetwork"] = True
        if edit:
            edit(spec)
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": dict(tmpl["metadata"]["labels"])},
                "spec": spec}

    def engine_pod(self, name, uid, command, socket_host_dir, memory=None, edit=None):
        """engine.yaml's pod template with the test's command, user and (optionally) limit."""
        dep = engine_template()
        tmpl = copy.deepcopy(dep["spec"]["template"])
        spec = tmpl["spec"]
        for v in spec.get("volumes", []):
            if "hostPath" in v:
                v["hostPath"]["path"] = socket_host_dir
        c = spec["containers"][0]
        c["image"] = self.image
        c["command"] = command
        spec["securityContext"]["runAsUser"] = uid
        spec["securityContext"]["runAsGroup"] = uid
        spec["restartPolicy"] = "Never"
        if memory:
            c["resources"] = {"requests": {"memory": memory}, "limits": {"memory": memory}}
        if edit:
            edit(spec)
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": dict(tmpl["metadata"]["labels"])},
                "spec": spec}

    # --- playing ----------------------------------------------------------------------------

    def play(self, pod):
        name = pod["metadata"]["name"]
        if pod["spec"].get("hostNetwork"):
            # Kubernetes takes a host-network container's ports as documentation (the metrics
            # port); podman refuses port mappings outside its own networks, and on the host
            # network there is nothing to map
            for c in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
                c.pop("ports", None)
        p = self.path(f"{name}.yaml")
        with open(p, "w") as f:
            yaml.safe_dump(pod, f, sort_keys=False)
        self.pods.append(name)
        podman("kube", "play", "--network", "none" if not pod["spec"].get("hostNetwork") else
               "host", p, timeout=300)
        return name

    def remove(self, name, grace=30):
        podman("pod", "rm", "-f", "-t", str(grace), name, check=False, timeout=grace + 60)
        if name in self.pods:
            self.pods.remove(name)

    def ctr(self, pod, container):
        return f"{pod}-{container}"

    def inspect(self, pod, container):
        out = podman("container", "inspect", self.ctr(pod, container))
        return json.loads(out)[0]

    def logs(self, pod, container):
        r = subprocess.run(["podman", "logs", self.ctr(pod, container)], capture_output=True,
                           text=True, timeout=60)
        return r.stdout + r.stderr

    def exec(self, pod, container, *cmd, check=True):
        r = subprocess.run(["podman", "exec", self.ctr(pod, container), *cmd],
                           capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"exec {cmd}: {r.returncode}: {r.stdout}{r.stderr}")
        return r.stdout

    def state(self, pod, container):
        try:
            return self.inspect(pod, container)["State"]
        except RuntimeError:
            return {}

    def wait_exit(self, pod, container, timeout=300):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.state(pod, container)
            if st.get("Status") in ("exited", "stopped") and st.get("FinishedAt"):
                return st
            time.sleep(0.2)
        raise RuntimeError(f"{pod}/{container} still runs after {timeout} s")

    def cleanup(self):
        for name in list(self.pods):
            self.remove(name, grace=5)
        for d in reversed(self.mounts):
            subprocess.run(["umount", "-l", d], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def start_s3(root):
    """tests/remote/servers.py serving `root` through s3rver behind the SigV4 check: the process
    (its stdin keeps it running) and what it said when ready (addresses, keys)."""
    servers = subprocess.Popen([sys.executable, os.path.join(SRC, "tests", "remote", "servers.py"),
                                "--root", root, "--s3"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    line = servers.stdout.readline()
    if not line.startswith("ready "):
        raise RuntimeError(f"servers.py: {line}")
    return servers, json.loads(line[6:])


def cgroup_memory(pid):
    """(container cgroup, pod cgroup, their charged bytes, and the container's shmem bytes) of a
    process, from the memory controller's files (cgroup v1 or v2)."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = f.read().splitlines()
    v1 = [l.split(":", 2)[2] for l in lines if l.split(":", 2)[1] == "memory"]
    if v1:
        base, usage, stat = "/sys/fs/cgroup/memory", "memory.usage_in_bytes", "memory.stat"
        rel = v1[0]
    else:
        base, usage, stat = "/sys/fs/cgroup", "memory.current", "memory.stat"
        rel = [l.split(":", 2)[2] for l in lines if l.startswith("0::")][0]
    return base + rel, usage, stat


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def memstat(path, key):
    with open(path) as f:
        for line in f:
            k, v = line.split()
            if k == key:
                return int(v)
    return 0
