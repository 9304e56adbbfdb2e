#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""weightd in pods, played by podman from deploy/kubernetes (tests/deploy/pods.py renders them):
weightd's Pod from the DaemonSet's template, engine Pods from engine.yaml with a test command
(engine_probe.py), all on weightd's own image (scripts/image). What it shows:

1. engine pods share no IPC namespace and no /dev/shm with weightd; they get their weights over
   the socket in the hostPath directory, and every byte matches the source (SHA-256);
2. an engine pod limited to 64 MiB maps and reads 1 GiB of weights and is not OOM-killed; the
   memory charged to weightd's pod and to the engine pods is read from their cgroup files;
3. two engine pods under different uids, with allow_users, each see only their own checkpoints;
4. weightd's container SIGKILLed while an engine holds mappings comes back by its restart policy;
   the engine reads unchanged bytes throughout; the new container re-adopts with 0 bytes read
   from the local checkpoints and 0 payload requests to the test's S3 server;
5. the pod replaced by a new pod (as a rolling update does) re-adopts the same way; the memory
   charged before and after is printed;
6. each error of a misconfigured pod is produced and its words checked: the socket's directory
   not shared with the engine, a /dev/shm too small for the budget (a refusal, never a SIGBUS),
   a segment directory that is not a tmpfs or not weightd's, a Secret with the wrong mode or
   owner.

Skips (exit 77) with the reason when podman cannot run here; under CI=true a skip fails.
Usage: test_pods.py (WD_IMAGE names the image, default localhost/weightd:<version>)."""
import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pods  # noqa: E402

failures = []
passed = 0
# what the test asks weightd from inside its pod goes to the admin socket, where weightd's own
# user sees every checkpoint (on the engine socket it is an ordinary client)
ADMIN_SOCKET = "/run/weightd-admin/weightd.sock"
MiB = 1 << 20
PROBE = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_probe.py")).read()


def check(ok, what):
    global passed
    if ok:
        passed += 1
        print(f"ok: {what}", flush=True)
    else:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return ok


def skip(why):
    print(f"SKIP: {why}", flush=True)
    if os.environ.get("CI", "") == "true":
        print("FAIL: CI=true: the pod tests must run in CI (scripts/deps installs podman and runc)")
        print("0 passed, 1 failed")
        sys.exit(1)
    sys.exit(77)


def write_safetensors(path, tensors, seed):
    """A safetensors file of U8 tensors {name: size} filled from a seeded SHA-256 stream, and
    the SHA-256 of its tensors' bytes in name order (what engine_probe.py prints)."""
    header, off = {}, 0
    for n in sorted(tensors):
        header[n] = {"dtype": "U8", "shape": [tensors[n]], "data_offsets": [off, off + tensors[n]]}
        off += tensors[n]
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    whole = hashlib.sha256()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        block = hashlib.sha256(f"{seed}".encode()).digest() * (MiB // 32)
        for n in sorted(tensors):
            left, i = tensors[n], 0
            while left:
                # a different MiB each time: one byte of each 32 varies with the position
                b = bytearray(block[:min(MiB, left)])
                b[::32] = bytes([(i + seed) & 0xFF]) * len(b[::32])
                f.write(b)
                whole.update(b)
                left -= len(b)
                i += 1
    os.chmod(path, 0o644)
    return whole.hexdigest(), 8 + len(h)


def events(node, pod, ctr="engine"):
    out = []
    for line in node.logs(pod, ctr).splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def wait_event(node, pod, kind, timeout=180, ctr="engine"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for e in events(node, pod, ctr):
            if e.get("event") in (kind, "error"):
                return e
        st = node.state(pod, ctr)
        if st.get("Status") == "exited":
            for e in events(node, pod, ctr):
                if e.get("event") in (kind, "error"):
                    return e
            raise RuntimeError(f"{pod} exited ({st.get('ExitCode')}) before {kind}: "
                               + node.logs(pod, ctr)[-2000:])
        time.sleep(0.2)
    raise RuntimeError(f"{pod}: no {kind} within {timeout} s: " + node.logs(pod, ctr)[-2000:])


def status(node, pod):
    return json.loads(node.exec(pod, "weightd", "/usr/bin/weightctl", "--socket", ADMIN_SOCKET,
                                "--json", "status"))


def wait_ready(node, pod, ckpts, timeout=120):
    """weightd in pod answers and has admitted every checkpoint."""
    end = time.monotonic() + timeout
    last = ""
    while time.monotonic() < end:
        r = subprocess.run(["podman", "exec", node.ctr(pod, "weightd"), "/usr/bin/weightctl",
                            "--socket", ADMIN_SOCKET, "--json", "list"], capture_output=True,
                           text=True, timeout=60)
        last = r.stdout + r.stderr
        if r.returncode == 0:
            try:
                srcs = json.loads(r.stdout)
                srcs = srcs["sources"]
                ready = {s["name"] for s in srcs if s.get("state") == "ready"}
                if set(ckpts) <= ready:
                    return
            except (ValueError, KeyError, TypeError):
                pass
        time.sleep(0.3)
    raise RuntimeError(f"weightd in {pod} not ready within {timeout} s: {last[-1000:]}\n"
                       + node.logs(pod, "weightd")[-3000:])


def s3_seen(port, obj, start, since=0):
    """(payload, metadata) requests the SigV4 proxy saw for obj after the first `since` ranges."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__stats") as r:
        st = json.load(r)
    payload = meta = 0
    for path, rng in st["ranges"][since:]:
        if path != obj:
            continue
        m = re.match(r"bytes=(\d+)-", rng or "")
        if m and int(m.group(1)) < start:
            meta += 1
        else:
            payload += 1
    return payload, meta, len(st["ranges"])


def main():
    image = os.environ.get("WD_IMAGE") or f"localhost/weightd:{pods.version()}"
    node = pods.Node(image, f"t{os.getpid()}")
    pods.podman_env(node.root)
    why = pods.why_podman_cannot_run(image)
    if why:
        node.cleanup()
        skip(why)
    servers = None
    try:
        servers = run(node)
    finally:
        if servers:
            servers.stdin.close()
            servers.wait(timeout=30)
        node.cleanup()


def base_conf(budget, segment_dir, extra=""):
    """The ConfigMap's weightd.conf: its [daemon] section with the test's budget and segment
    directory, the test's checkpoints instead of the example's."""
    text = pods.configmap_conf()
    daemon = text.split("[checkpoint:")[0]
    daemon = re.sub(r"(?m)^budget = .*$", f"budget = {budget}", daemon)
    daemon = re.sub(r"(?m)^segment_dir = .*$", f"segment_dir = {segment_dir}", daemon)
    daemon = re.sub(r"(?m)^log_level = .*$", "log_level = info", daemon)
    # the pods run on the host's network here: no port of the host is taken for metrics
    daemon = re.sub(r"(?m)^metrics_(listen|public) = .*$\n?", "", daemon)
    return daemon + extra


def run(node):
    t0 = time.monotonic()
    # --- the node: the socket's directory, the segments' tmpfs, the state index, checkpoints
    run_dir = node.dir("run")
    seg_dir = node.tmpfs("segments", "huge=within_size,size=4g,mode=0755")
    state_dir = node.dir("state")
    ck = node.dir("ckpt")
    big_digest, _ = write_safetensors(f"{ck}/big.safetensors",
                                      {f"w{i}": 128 * MiB for i in range(8)}, 1)
    a_digest, _ = write_safetensors(f"{ck}/a.safetensors", {"x": 3 * MiB, "y": 1 * MiB}, 2)
    b_digest, _ = write_safetensors(f"{ck}/b.safetensors", {"x": 2 * MiB}, 3)
    s3root = node.dir("s3")
    r_digest, r_start = write_safetensors(f"{s3root}/remote.safetensors",
                                          {f"r{i}": 16 * MiB for i in range(4)}, 4)
    print(f"fixtures written in {time.monotonic() - t0:.1f} s", flush=True)
    servers, srv = pods.start_s3(s3root)

    checkpoints = f"""
[checkpoint:big]
path = /checkpoints/big.safetensors
allow_users = 1000

[checkpoint:a]
path = /checkpoints/a.safetensors
allow_users = 1000

[checkpoint:b]
path = /checkpoints/b.safetensors
allow_users = 1001

[checkpoint:remote]
path = s3://{srv['bucket']}/remote.safetensors
endpoint = http://127.0.0.1:{srv['s3']}
path_style = yes
allow_http = yes
region = us-east-1
credentials_file = /run/weightd-secrets/s3.credentials
allow_users = 1000 1001
"""
    conf_dir = node.dir("config")
    node.write("config/weightd.conf", base_conf("3G", "/var/lib/weightd/segments", checkpoints))
    secret_dir = node.dir("secret")
    creds = (f"[default]\naws_access_key_id = {srv['s3_key']}\n"
             f"aws_secret_access_key = {srv['s3_secret']}\n")
    node.write("secret/s3.credentials", creds, mode=0o400)
    hp = {"/run/weightd": run_dir, "/run/weightd-admin": node.dir("run-admin"),
          "/var/lib/weightd/segments": seg_dir, "/var/lib/weightd/state": state_dir}
    all_ckpts = ["big", "a", "b", "remote"]

    def weightd_pod(name):
        # hostNetwork: the test's S3 server listens on the host's loopback
        return node.weightd_pod(name, conf_dir, secret_dir, hp, [(ck, "/checkpoints")],
                                host_network=True)

    def engine(name, uid, *args, memory=None, edit=None):
        return node.play(node.engine_pod(name, uid, ["/usr/bin/python3", "-c", PROBE, *args], run_dir,
                                         memory=memory, edit=edit))

    p1 = node.play(weightd_pod(f"{node.tag}-weightd-1"))
    wait_ready(node, p1, all_ckpts)
    print(f"weightd pod up in {time.monotonic() - t0:.1f} s", flush=True)
    wd_pid = node.inspect(p1, "weightd")["State"]["Pid"]
    check(os.stat(f"/proc/{wd_pid}").st_uid == 65532, "weightd runs as uid 65532, not root")

    # 1 + 2: an engine limited to 64 MiB holds 1 GiB, 4 MiB and a remote 64 MiB checkpoint
    e1 = engine(f"{node.tag}-engine-hold", 1000, "hold", "stop-hold", "big", "a", "remote",
                memory="64Mi")
    m = wait_event(node, e1, "mapped", timeout=300)
    check(m.get("event") == "mapped", f"the engine maps its weights ({m.get('error', '')})")
    want = {"big": big_digest, "a": a_digest, "remote": r_digest}
    check(m.get("digests") == want, "1: every byte the engine maps matches the source (SHA-256)")
    wd_ipc = node.exec(p1, "weightd", "/usr/bin/readlink", "/proc/self/ns/ipc").strip()
    wd_shm = node.exec(p1, "weightd", "/usr/bin/stat", "-c", "%d", "/dev/shm").strip()
    check(m.get("ipc") and m["ipc"] != wd_ipc,
          f"1: the engine's IPC namespace ({m.get('ipc')}) is not weightd's ({wd_ipc})")
    check(str(m.get("shm_dev")) != wd_shm and m.get("shm_entries") == [],
          "1: the engine's /dev/shm is its own (another device, empty), not weightd's")
    st0 = status(node, p1)
    check(st0.get("segment_page_bytes") == 2 * MiB and st0.get("segment_huge_bytes", 0) > 0 and
          m.get("pmd_mapped", 0) >= 512 * MiB,
          f"1: segments on the node's tmpfs get 2 MiB pages ({st0.get('segment_huge_bytes', 0) // MiB}"
          f" MiB huge), and the engine maps them with PMDs ({m.get('pmd_mapped', 0) // MiB} MiB "
          "PMD-mapped)")
    eng_vols = node.inspect(e1, "engine")["Mounts"]
    check([x["Source"] for x in eng_vols if x["Type"] == "bind"] == [run_dir],
          "1: the engine's only volume is the socket's directory on the host")

    time.sleep(1.5)  # a few reading passes
    e_pid = node.inspect(e1, "engine")["State"]["Pid"]
    ecg, usage, stat = pods.cgroup_memory(e_pid)
    wcg, _, _ = pods.cgroup_memory(node.inspect(p1, "weightd")["State"]["Pid"])
    e_use, w_use = pods.read_int(f"{ecg}/{usage}"), pods.read_int(f"{wcg}/{usage}")
    e_pod, w_pod = pods.read_int(f"{os.path.dirname(ecg)}/{usage}"), \
        pods.read_int(f"{os.path.dirname(wcg)}/{usage}")
    print(f"memory charged: weightd container {w_use / MiB:.0f} MiB (pod {w_pod / MiB:.0f} MiB,"
          f" shmem {pods.memstat(f'{wcg}/{stat}', 'shmem') / MiB:.0f} MiB); engine container "
          f"{e_use / MiB:.1f} MiB (pod {e_pod / MiB:.1f} MiB, limit 64 MiB) while it maps "
          f"{m['bytes'] / MiB:.0f} MiB ({wcg}, {ecg})", flush=True)
    st = node.state(e1, "engine")
    check(st.get("Status") == "running" and not st.get("OOMKilled"),
          "2: the engine limited to 64 MiB reads 1 GiB of weights and is not OOM-killed")
    check(e_use < 64 * MiB and w_use >= 1024 * MiB,
          "2: the weights are charged to weightd's cgroup, not to the engine's")
    checks = [e for e in events(node, e1) if e["event"] == "check"]
    check(checks and all(c["digests"] == want for c in checks),
          f"2: the engine read every byte again, {len(checks)} times, unchanged")

    # 3: two uids, each its own checkpoints
    ea = engine(f"{node.tag}-engine-uid1000", 1000, "list")
    eb = engine(f"{node.tag}-engine-uid1001", 1001, "list")
    la, lb = wait_event(node, ea, "list"), wait_event(node, eb, "list")
    check(la.get("names") == ["a", "big", "remote"], f"3: uid 1000 sees a, big, remote ({la})")
    check(lb.get("names") == ["b", "remote"], f"3: uid 1001 sees b, remote ({lb})")
    gb = engine(f"{node.tag}-engine-uid1001-b", 1001, "get", "b")
    ga = engine(f"{node.tag}-engine-uid1001-a", 1001, "get", "a")
    r = wait_event(node, gb, "mapped")
    check(r.get("digest") == b_digest, "3: uid 1001 maps b, byte for byte")
    r = wait_event(node, ga, "mapped")
    check(r.get("event") == "error" and 'no checkpoint named "a"' in r.get("error", ""),
          f"3: uid 1001 is told a does not exist ({r.get('error')})")
    for p in (ea, eb, gb, ga):
        node.remove(p, grace=1)

    # 4: SIGKILL of weightd's container while the engine holds its mappings
    before = status(node, p1)
    seen_since = s3_seen(srv["s3"], "/bkt/remote.safetensors", r_start)[2]
    n_checks = len(checks)
    os.kill(wd_pid, signal.SIGKILL)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        st = node.state(p1, "weightd")
        if st.get("Status") == "running" and st.get("Pid") not in (0, wd_pid):
            break
        time.sleep(0.2)
    check(st.get("Pid") not in (0, wd_pid) and st.get("Status") == "running",
          f"4: the restart policy brings weightd back after SIGKILL (pid {wd_pid} -> "
          f"{st.get('Pid')})")
    wait_ready(node, p1, all_ckpts)
    e2 = engine(f"{node.tag}-engine-after-kill", 1000, "get", "big")
    r = wait_event(node, e2, "mapped")
    check(r.get("digest") == big_digest, "4: a new engine maps big after the restart, byte for "
          "byte")
    e3 = engine(f"{node.tag}-engine-after-kill-r", 1000, "get", "remote")
    r = wait_event(node, e3, "mapped")
    check(r.get("digest") == r_digest, "4: and the remote checkpoint")
    after = status(node, p1)
    payload, meta, _ = s3_seen(srv["s3"], "/bkt/remote.safetensors", r_start, seen_since)
    print(f"after SIGKILL: {after['readoptions']} weights re-adopted, {after['bytes_read']} "
          f"checkpoint bytes read, S3: {meta} metadata and {payload} payload requests "
          f"(before: {before['bytes_read']} bytes read)", flush=True)
    check(after["bytes_read"] == 0 and after["readoptions"] > 0,
          "4: the new container re-adopted with 0 bytes read from the local checkpoints")
    check(payload == 0, "4: and 0 payload requests to S3 for the remote one")
    time.sleep(1)
    checks = [e for e in events(node, e1) if e["event"] == "check"]
    check(len(checks) > n_checks and all(c["digests"] == want for c in checks),
          f"4: the holding engine read unchanged bytes throughout ({len(checks) - n_checks} "
          "passes since the kill)")
    for p in (e2, e3):
        node.remove(p, grace=1)

    # 5: the pod replaced by a new one, as a rolling update does (old pod stopped, new started)
    wcg_old, usage, stat = pods.cgroup_memory(node.inspect(p1, "weightd")["State"]["Pid"])
    parent = os.path.dirname(os.path.dirname(wcg_old))
    old_pod_use = pods.read_int(f"{os.path.dirname(wcg_old)}/{usage}")
    parent_before = pods.read_int(f"{parent}/{usage}")
    seen_since = s3_seen(srv["s3"], "/bkt/remote.safetensors", r_start)[2]
    n_checks = len(events(node, e1))
    t_rep = time.monotonic()
    node.remove(p1, grace=30)
    p2 = node.play(weightd_pod(f"{node.tag}-weightd-2"))
    wait_ready(node, p2, all_ckpts)
    e4 = engine(f"{node.tag}-engine-new-pod", 1000, "hold", "stop-new", "big", "a", "remote")
    r = wait_event(node, e4, "mapped")
    t_rep = time.monotonic() - t_rep
    check(r.get("digests") == want, "5: after the pod's replacement an engine maps every "
          "checkpoint, byte for byte")
    after = status(node, p2)
    payload, meta, _ = s3_seen(srv["s3"], "/bkt/remote.safetensors", r_start, seen_since)
    check(after["bytes_read"] == 0 and after["readoptions"] > 0 and payload == 0,
          f"5: the new pod re-adopted with 0 bytes read and 0 payload requests to S3 "
          f"({after['readoptions']} weights, {after['bytes_read']} bytes, {payload} payload "
          f"requests, {meta} metadata)")
    wcg_new, _, _ = pods.cgroup_memory(node.inspect(p2, "weightd")["State"]["Pid"])
    new_pod_use = pods.read_int(f"{os.path.dirname(wcg_new)}/{usage}")
    parent_after = pods.read_int(f"{parent}/{usage}")
    shmem = pods.memstat("/proc/meminfo".replace("", ""), "x") if False else None
    print(f"memory across the replacement: old pod {old_pod_use / MiB:.0f} MiB; new pod "
          f"{new_pod_use / MiB:.0f} MiB after re-adopting {m['bytes'] / MiB:.0f} MiB; their "
          f"parent ({parent}) {parent_before / MiB:.0f} MiB before, {parent_after / MiB:.0f} MiB "
          f"after; replaced and every weight mapped in {t_rep:.1f} s", flush=True)
    check(new_pod_use < 256 * MiB and old_pod_use >= 1024 * MiB,
          "5: the re-adopted pages are not charged to the new pod (they stay with the old one's "
          "cgroup)")
    checks = [e for e in events(node, e1) if e["event"] == "check"]
    check(all(c["digests"] == want for c in checks) and len(events(node, e1)) > n_checks,
          "5: the holding engine read unchanged bytes through the replacement")
    node.write("run/stop-hold", "", mode=0o644)
    node.write("run/stop-new", "", mode=0o644)
    node.wait_exit(e1, "engine", 60)
    node.wait_exit(e4, "engine", 60)
    st = node.state(e1, "engine")
    check(st.get("ExitCode") == 0 and not st.get("OOMKilled"),
          "2: the 64 MiB engine ends by itself, never OOM-killed")
    node.remove(e1, grace=1)
    node.remove(e4, grace=1)
    node.remove(p2, grace=30)

    errors(node, ck, srv, run_dir)
    return servers


def errors(node, ck, srv, run_dir):
    """6: each misconfiguration, and the words weightd says about it."""
    # a) an engine pod that does not mount the socket's directory
    def no_socket(spec):
        spec["volumes"] = []
        spec["containers"][0].pop("volumeMounts", None)
    p = node.play(node.engine_pod(f"{node.tag}-engine-nosock", 1000,
                                  ["/usr/bin/python3", "-c", PROBE, "connect"], run_dir, edit=no_socket))
    r = wait_event(node, p, "connected")
    check(r.get("event") == "error" and "cannot connect to weightd at /run/weightd/weightd.sock"
          in r.get("error", "") and "hostPath" in r.get("error", ""),
          f"6: an engine without the socket's directory is told to mount it ({r.get('error')})")
    node.remove(p, grace=1)

    def one_weightd(name, conf, hp_extra=None, edit=None, secret_mode=0o400, secret_owner=0,
                    secret_group=0):
        run2 = node.dir(f"{name}-run")
        state2 = node.dir(f"{name}-state")
        seg2 = hp_extra or node.tmpfs(f"{name}-seg", "huge=within_size,size=256m,mode=0755")
        conf2 = node.dir(f"{name}-conf")
        node.write(f"{name}-conf/weightd.conf", conf)
        sec2 = node.dir(f"{name}-secret")
        node.write(f"{name}-secret/s3.credentials", "[default]\naws_access_key_id = K\n"
                   "aws_secret_access_key = S\n", mode=secret_mode, owner=secret_owner,
                   group=secret_group)
        hp = {"/run/weightd": run2, "/run/weightd-admin": node.dir(f"{name}-run-admin"),
              "/var/lib/weightd/segments": seg2, "/var/lib/weightd/state": state2}
        pod = node.weightd_pod(name, conf2, sec2, hp, [(ck, "/checkpoints")],
                               host_network=True, restart="Never", edit=edit)
        node.play(pod)
        return name, run2

    # b) segments in the pod's own /dev/shm (podman's and Kubernetes' default: 64 MiB)
    # uid 1000 may hold the whole budget: what refuses the fill is the tmpfs's size
    conf = base_conf("1G", "", "budget_users = 1000\n\n[checkpoint:big]\n"
                     "path = /checkpoints/big.safetensors\n")
    name, run2 = one_weightd(f"{node.tag}-err-shm", conf)
    wait_ready(node, name, ["big"])
    log = node.logs(name, "weightd")
    check(re.search(r"budget 1(\.0)? GiB is more than /dev/shm holds \(6\d(\.\d)? MiB\)", log) and
          "sizeLimit" in log and "segment_dir" in log,
          "6: a /dev/shm smaller than the budget is named, with what to give weightd: " +
          next((x for x in log.splitlines() if "budget" in x), "(no line)"))
    p = node.play(node.engine_pod(f"{node.tag}-engine-shm", 1000,
                                  ["/usr/bin/python3", "-c", PROBE, "get", "big"], run2))
    r = wait_event(node, p, "mapped")
    st = node.state(name, "weightd")
    check(r.get("event") == "error" and "budget" in r.get("error", "") and
          st.get("Status") == "running" and st.get("RestartCount", 0) == 0,
          f"6: a fill larger than /dev/shm is refused, weightd still runs (no SIGBUS): "
          f"{r.get('error', r)}")
    node.remove(p, grace=1)
    node.remove(name, grace=10)

    # c) a segment directory that is not a tmpfs
    plain = node.dir("plain-segments")
    conf = base_conf("128M", "/var/lib/weightd/segments")
    name, _ = one_weightd(f"{node.tag}-err-notmpfs", conf, hp_extra=plain)
    st = node.wait_exit(name, "weightd", 60)
    log = node.logs(name, "weightd")
    check(st.get("ExitCode") != 0 and "is not a tmpfs" in log and "mount -t tmpfs" in log,
          "6: a segment directory that is not a tmpfs is refused, naming the mount: " +
          next((x for x in log.splitlines() if "tmpfs" in x), "(no line)"))
    node.remove(name, grace=1)

    # c') one that is not weightd's: the init container did not give it to uid 65532
    def keep_root_segments(spec):
        for c in spec["initContainers"]:
            c["command"] = [re.sub(r" /var/lib/weightd/segments\b", "", x) for x in c["command"]]
    name, _ = one_weightd(f"{node.tag}-err-owner", conf, edit=keep_root_segments)
    st = node.wait_exit(name, "weightd", 60)
    log = node.logs(name, "weightd")
    check(st.get("ExitCode") != 0 and "not by weightd's uid 65532" in log and
          "chown 65532" in log,
          "6: a segment directory weightd's user does not own is refused, naming the chown: " +
          next((x for x in log.splitlines() if "owned by" in x), "(no line)"))
    node.remove(name, grace=1)

    # d) the Secret given to weightd directly: with fsGroup's mode and group (weightd's), as
    # Kubernetes makes it (root's, 0400), or another user's
    remote = (f"\n[checkpoint:remote]\npath = s3://{srv['bucket']}/remote.safetensors\n"
              f"endpoint = http://127.0.0.1:{srv['s3']}\npath_style = yes\nallow_http = yes\n"
              "region = us-east-1\ncredentials_file = /run/weightd-secrets/s3.credentials\n")
    conf = base_conf("128M", "/var/lib/weightd/segments", remote)
    denied = "Permission denied: weightd's user (uid 65532) must own it"
    for mode, owner, group, words in ((0o440, 0, 65532, "can be read by others (mode 0440)"),
                                      (0o400, 0, 0, denied), (0o400, 1234, 1234, denied)):
        def secret_direct(spec):
            # no copy by the init container: weightd mounts the Secret's files themselves
            for c in spec["initContainers"]:
                c["command"] = [re.sub(r"&&\s*install -o [^&]*s3.credentials\s*$", "", x)
                                for x in c["command"]]
                c["volumeMounts"] = [v for v in c["volumeMounts"] if v["name"] != "secrets"]
            wdc = spec["containers"][0]
            for v in wdc["volumeMounts"]:
                if v["name"] == "secrets":
                    v["name"] = "s3-secret"
        name, _ = one_weightd(f"{node.tag}-err-secret-{mode:o}-{owner}", conf,
                              edit=secret_direct, secret_mode=mode, secret_owner=owner,
                              secret_group=group)
        end = time.monotonic() + 60
        log = ""
        while time.monotonic() < end and "credentials file" not in log:
            time.sleep(0.3)
            log = node.logs(name, "weightd")
        line = next((x for x in log.splitlines() if "credentials file" in x), "(no line)")
        check(words in line and "defaultMode 0400" in line and "init container" in line,
              f"6: a Secret mounted with mode {mode:04o}, owner {owner}:{group}: {line}")
        node.remove(name, grace=5)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a failure of the harness is a failure
        import traceback
        traceback.print_exc()
        failures.append(str(e))
    print(f"{passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)
