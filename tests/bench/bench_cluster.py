#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_cluster: weightd on a node, as pods (podman plays them from deploy/kubernetes, as
tests/deploy/test_pods.py does). Four engine pods and one checkpoint of 2 GiB (16 tensors of
128 MiB) in the test's S3 server (s3rver behind the SigV4 proxy of tests/remote/servers.py).
Measured side by side in one run, each from the start of the pods that do the work to "every
engine pod has every weight mapped" (or loaded, for the reference):

- cold: a new weightd pod on an empty node, streaming the checkpoint from S3 once for all four;
- re-adoption: that pod replaced by a new one (as a rolling update does: the old one stopped
  with SIGTERM, the new one started), four new engine pods;
- reference: four engine pods with no weightd, each downloading the checkpoint into its own
  emptyDir (8 parallel ranges, the same bytes from nginx on the same host, unsigned) and loading
  it into its own memory, as an engine without weightd does.

Prints the times, the ratios, and the memory each way costs the node. Usage: bench_cluster.py
[--size-gib N] [--engines N] [--runs N]. No target is asserted (the machine is shared): the
figures go in docs/performance.md."""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "deploy"))
import pods  # noqa: E402
import test_pods  # noqa: E402

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gib", type=int, default=2)
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    src = pods.SRC
    r = subprocess.run([os.path.join(src, "scripts", "image")], text=True)
    if r.returncode != 0:
        sys.exit("bench_cluster: scripts/image failed")
    image = f"localhost/weightd:{pods.version()}"
    node = pods.Node(image, f"b{os.getpid()}")
    pods.podman_env(node.root)
    why = pods.why_podman_cannot_run(image)
    if why:
        node.cleanup()
        sys.exit(f"bench_cluster: {why}")
    servers = None
    try:
        servers, results = run(node, a)
    finally:
        if servers:
            servers.stdin.close()
            servers.wait(timeout=60)
        node.cleanup()
    print()
    print(f"{a.engines} engine pods, a {a.size_gib} GiB checkpoint (medians of {a.runs}):")
    cold, readopt, ref = (statistics.median(results[k]) for k in ("cold", "readopt", "ref"))
    gib = a.size_gib
    print(f"  cold start from S3 through weightd   {cold:7.2f} s  ({gib / cold:.2f} GiB/s of "
          f"checkpoint, once for all {a.engines})")
    print(f"  new weightd pod, re-adopted           {readopt:7.2f} s  ({cold / readopt:.1f}x "
          f"faster than cold)")
    print(f"  reference: each engine downloads     {ref:7.2f} s  (weightd cold is "
          f"{ref / cold:.2f}x faster, re-adoption {ref / readopt:.1f}x)")
    for k, v in results.items():
        if k.startswith("mem"):
            print(f"  {k[4:]}: {v}")


def run(node, a):
    run_dir = node.dir("run")
    seg_dir = node.tmpfs("segments", f"huge=within_size,size={a.size_gib + 2}g,mode=0755")
    state_dir = node.dir("state")
    s3root = node.dir("s3")
    n = a.size_gib * 8
    t = time.monotonic()
    test_pods.write_safetensors(f"{s3root}/model.safetensors",
                                {f"layer{i:02d}": 128 * MiB for i in range(n)}, 7)
    print(f"checkpoint written in {time.monotonic() - t:.1f} s", flush=True)
    t = time.monotonic()
    servers, srv = pods.start_s3(s3root)
    print(f"servers up (s3rver holding the checkpoint) in {time.monotonic() - t:.1f} s",
          flush=True)
    # the four engines run as one uid, which may hold the whole budget
    conf = test_pods.base_conf(f"{a.size_gib + 1}G", "/var/lib/weightd/segments", f"""budget_users = 1000

[checkpoint:model]
path = s3://{srv['bucket']}/model.safetensors
endpoint = http://127.0.0.1:{srv['s3']}
path_style = yes
allow_http = yes
region = us-east-1
credentials_file = /run/weightd-secrets/s3.credentials
allow_users = 1000
""")
    conf_dir = node.dir("config")
    node.write("config/weightd.conf", conf)
    secret_dir = node.dir("secret")
    node.write("secret/s3.credentials", f"[default]\naws_access_key_id = {srv['s3_key']}\n"
               f"aws_secret_access_key = {srv['s3_secret']}\n", mode=0o400)
    hp = {"/run/weightd": run_dir, "/var/lib/weightd/segments": seg_dir,
          "/var/lib/weightd/state": state_dir}
    probe = test_pods.PROBE
    results = {"cold": [], "readopt": [], "ref": []}
    seq = [0]

    def engines(cmd, edit=None, host_network=False):
        names = []
        for i in range(a.engines):
            seq[0] += 1

            def ed(spec, edit=edit):
                if host_network:
                    spec["hostNetwork"] = True
                if edit:
                    edit(spec)
            names.append(node.play(node.engine_pod(f"{node.tag}-engine-{seq[0]}", 1000,
                                                   ["/usr/bin/python3", "-c", probe, *cmd], run_dir,
                                                   edit=ed)))
        return names

    def done_at(names, kind):
        ts = []
        for p in names:
            e = test_pods.wait_event(node, p, kind, timeout=900)
            if e.get("event") != kind:
                raise RuntimeError(f"{p}: {e}")
            ts.append(e["t"])
        for p in names:
            node.remove(p, grace=1)
        return max(ts)

    def weightd_pod(name):
        return node.weightd_pod(name, conf_dir, secret_dir, hp, host_network=True)

    for r in range(a.runs):
        # cold: an empty node (no segments, no state)
        subprocess.run(f"rm -rf {seg_dir}/* {state_dir}/*", shell=True, check=True)
        t0 = time.time()
        p = node.play(weightd_pod(f"{node.tag}-weightd-c{r}"))
        cold = done_at(engines(["bench", "model"]), "mapped") - t0
        results["cold"].append(cold)
        print(f"run {r}: cold {cold:.2f} s", flush=True)
        sv = os.statvfs(seg_dir)
        results["mem weightd"] = (f"{(sv.f_blocks - sv.f_bfree) * sv.f_frsize / MiB:.0f} MiB in "
                                  f"the node's tmpfs, one copy for all {a.engines} engines")
        # re-adoption: the pod replaced
        node.remove(p, grace=30)
        t0 = time.time()
        p = node.play(weightd_pod(f"{node.tag}-weightd-r{r}"))
        readopt = done_at(engines(["bench", "model"]), "mapped") - t0
        results["readopt"].append(readopt)
        print(f"run {r}: re-adoption {readopt:.2f} s", flush=True)
        node.remove(p, grace=30)

        # the reference: every engine downloads into its own emptyDir and loads
        def scratch(spec):
            spec["volumes"].append({"name": "scratch", "emptyDir": {}})
            spec["containers"][0]["volumeMounts"].append({"name": "scratch",
                                                          "mountPath": "/scratch"})
            spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
        url = f"http://127.0.0.1:{srv['http']}/model.safetensors"
        t0 = time.time()
        ref = done_at(engines(["download", url, "8"], edit=scratch, host_network=True),
                      "loaded") - t0
        results["ref"].append(ref)
        print(f"run {r}: reference {ref:.2f} s", flush=True)
        results["mem reference"] = (f"{a.engines} private copies ({a.engines * a.size_gib} GiB) "
                                    f"and {a.engines * a.size_gib} GiB on the node's disk")
    return servers, results


if __name__ == "__main__":
    main()
