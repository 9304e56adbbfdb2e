# SPDX-License-Identifier: Apache-2.0
"""The test command of the engine pods (tests/deploy/test_pods.py, bench_cluster.py), run in the
pod by `python3 -c` with python3-weightd from weightd's image. One JSON line per event on stdout.

  hold CKPT...     map every tensor of each checkpoint (single gets), print their digest
                   (SHA-256 over the tensors' bytes in name order), then read them all again and
                   print the digest after each pass until STOPFILE exists in the socket's
                   directory; also prints what it sees of its namespaces and /dev/shm
  list             the checkpoints this uid may see
  get CKPT         map CKPT's tensors once and print the digest, or the error
  connect          connect only, and print the error if any
  bench CKPT       wait for weightd and CKPT, map every tensor, print when done
  download URL N   the reference engine: fetch URL in N parallel ranges into /scratch, then read
                   the file into the process's own memory
"""
import hashlib
import json
import os
import sys
import time

SOCK = os.environ.get("WEIGHTD_SOCKET", "/run/weightd/weightd.sock")


def say(**kw):
    kw["t"] = time.time()
    print(json.dumps(kw), flush=True)


def digest(weights):
    h = hashlib.sha256()
    for _, w in weights:
        h.update(memoryview(w))
    return h.hexdigest()


def fetch(c, ckpt):
    names = sorted(t.name for t in c.describe(ckpt).tensors)
    return [(n, memoryview(c.get(ckpt, n))) for n in names]


def namespaces():
    st = os.stat("/dev/shm")
    pmd = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            # a tmpfs file's huge pages count as ShmemPmdMapped (FilePmdMapped elsewhere)
            if line.startswith(("ShmemPmdMapped:", "FilePmdMapped:")):
                pmd += int(line.split()[1]) * 1024
    return {"ipc": os.readlink("/proc/self/ns/ipc"), "shm_dev": st.st_dev,
            "shm_entries": sorted(os.listdir("/dev/shm")), "pmd_mapped": pmd}


def bench(ckpt, deadline=600):
    """Connect as soon as the socket is there and map every tensor of ckpt as soon as weightd
    has admitted it; print when all are mapped."""
    import weightd
    end = time.time() + deadline
    while True:
        try:
            c = weightd.connect(SOCK)
            names = sorted(t.name for t in c.describe(ckpt).tensors)
            break
        except Exception:  # noqa: BLE001 - not up yet, or still admitting
            if time.time() > end:
                raise
            time.sleep(0.05)
    ws = [c.get(ckpt, n) for n in names]
    say(event="mapped", bytes=sum(memoryview(w).nbytes for w in ws))


def main():
    import weightd
    cmd = sys.argv[1]
    if cmd == "bench":
        return bench(sys.argv[2])
    if cmd == "connect":
        try:
            weightd.connect(SOCK).close()
            say(event="connected")
        except Exception as e:  # noqa: BLE001 - the error's words are what is checked
            say(event="error", error=str(e), type=type(e).__name__)
        return
    if cmd == "download":
        return download(sys.argv[2], int(sys.argv[3]))
    c = weightd.connect(SOCK)
    if cmd == "list":
        say(event="list", names=sorted(s.name for s in c.list()))
        return
    if cmd == "get":
        try:
            ws = fetch(c, sys.argv[2])
            say(event="mapped", ckpt=sys.argv[2], digest=digest(ws),
                bytes=sum(memoryview(w).nbytes for _, w in ws))
        except Exception as e:  # noqa: BLE001
            say(event="error", ckpt=sys.argv[2], error=str(e), type=type(e).__name__)
        return
    if cmd == "hold":
        stop = os.path.join(os.path.dirname(SOCK), sys.argv[2])
        held = {}
        for ck in sys.argv[3:]:
            held[ck] = fetch(c, ck)
        say(event="mapped", digests={k: digest(v) for k, v in held.items()},
            bytes=sum(memoryview(w).nbytes for v in held.values() for _, w in v), **namespaces())
        # the weights stay mapped without the connection: read them through a restart of weightd
        c.close()
        passes = 0
        while not os.path.exists(stop):
            say(event="check", n=passes, digests={k: digest(v) for k, v in held.items()})
            passes += 1
            time.sleep(0.2)
        say(event="done", passes=passes)


def download(url, n):
    import concurrent.futures
    import urllib.request
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as r:
        size = int(r.headers["Content-Length"])
    path = "/scratch/model.safetensors"
    with open(path, "wb") as f:
        f.truncate(size)
    step = (size + n - 1) // n

    def part(i):
        lo, hi = i * step, min(size, (i + 1) * step) - 1
        req = urllib.request.Request(url, headers={"Range": f"bytes={lo}-{hi}"})
        with urllib.request.urlopen(req) as r, open(path, "r+b") as f:
            f.seek(lo)
            while True:
                b = r.read(1 << 20)
                if not b:
                    break
                f.write(b)
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        list(ex.map(part, range(n)))
    with open(path, "rb") as f:
        data = bytearray(size)
        f.readinto(data)
    say(event="loaded", bytes=len(data))


main()
