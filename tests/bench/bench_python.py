#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_python: PyTorch processes loading a 1 GiB checkpoint through weightd, beside the
private way measured in the same run.

1. Load time, warm (weightd holds the weights, the file is in the page cache), medians of
   interleaved runs in one process: weightd's Client.load() into torch tensors, with and without
   touching every page, against reading the file into private memory and torch.frombuffer over
   those bytes (what a loader without weightd does at best).
2. Memory: 4 Python processes hold every tensor (every page touched); the sum of their PSS,
   and of the PSS of weightd's shared mappings alone, against 4 processes holding private
   copies.

Targets: the warm load with every page touched at least 2x faster than the private read, and the
4 processes' shared mappings at most 1.1 copies in PSS. Run by scripts/bench (which builds
build-bench/ and sets PYTHONPATH and WD_WEIGHTD); --size-mib and --runs change the defaults.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python", "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import weightd  # noqa: E402
import wdtest  # noqa: E402

PAGE = 4096

HOLDER = r"""
import os, sys, json
import torch, numpy as np
sys.path.insert(0, sys.argv[4])
import weightd, wdtest
mode, sock, path = sys.argv[1:4]
if mode == "weightd":
    c = weightd.connect(sock, "bench-holder")
    sd = c.load("bench")
else:
    sd = {}
    for name, (dt, shape, raw) in wdtest.read_safetensors(path).items():
        sd[name] = torch.frombuffer(bytearray(raw), dtype=torch.float32).view(shape)
        del raw
touched = sum(int(t.view(-1)[:: 4096 // 4].sum().item() != 0) for t in sd.values())
print("ready", flush=True)
sys.stdin.readline()
"""


def write_checkpoint(path: str, size_mib: int, tensor_mib: int) -> dict:
    n = max(1, size_mib // tensor_mib)
    elems = tensor_mib * 1024 * 1024 // 4
    rng = np.random.default_rng(1)
    block = rng.standard_normal(1 << 16).astype(np.float32)
    tensors = {}
    for i in range(n):
        data = np.tile(block + i, elems // block.size)
        tensors[f"layers.{i}.weight"] = ("F32", [elems // 4096, 4096], data.tobytes())
    wdtest.write_safetensors(path, tensors)
    return {k: v[1] for k, v in tensors.items()}


def touch(sd) -> None:
    for t in sd.values():
        t.view(-1)[:: PAGE // 4].sum()


def load_weightd(c, do_touch: bool) -> float:
    t0 = time.perf_counter()
    sd = c.load("bench")
    if do_touch:
        touch(sd)
    dt = time.perf_counter() - t0
    sd.release()
    del sd
    gc.collect()
    return dt


def load_private(path: str, shapes: dict) -> float:
    t0 = time.perf_counter()
    sd = {}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(8 + n)
        for name, shape in shapes.items():
            buf = bytearray(shape[0] * shape[1] * 4)
            f.readinto(buf)
            sd[name] = torch.frombuffer(buf, dtype=torch.float32).view(shape)
    dt = time.perf_counter() - t0
    del sd
    gc.collect()
    return dt


def hold(mode: str, sock: str, path: str, prefix: str, n: int) -> tuple:
    procs = []
    tests = os.path.join(HERE, "..", "..", "client", "python", "tests")
    try:
        for _ in range(n):
            p = subprocess.Popen([sys.executable, "-c", HOLDER, mode, sock, path, tests],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{mode} holder failed")
        pss = sum(wdtest.pss_rollup_kb(p.pid) for p in procs)
        shm = sum(m["Pss"] for p in procs for m in wdtest.shm_mappings(p.pid, prefix))
        return pss, shm
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--tensor-mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--processes", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)

    tmp = tempfile.mkdtemp(prefix="weightd-bench-py.", dir=os.environ.get("TMPDIR", "/tmp"))
    path = os.path.join(tmp, "bench.safetensors")
    shapes = write_checkpoint(path, args.size_mib, args.tensor_mib)
    size = os.path.getsize(path)
    d = wdtest.Daemon({"bench": path})
    try:
        with d.connect("bench") as c:
            t0 = time.perf_counter()
            warm = c.load("bench")          # cold materialization; held so it stays warm
            cold = time.perf_counter() - t0
            load_private(path, shapes)      # the file in the page cache
            wd_map, wd_touch, private = [], [], []
            for _ in range(args.runs):
                wd_map.append(load_weightd(c, False))
                wd_touch.append(load_weightd(c, True))
                private.append(load_private(path, shapes))
            m_map, m_touch, m_priv = (statistics.median(x) for x in (wd_map, wd_touch, private))
            gib = size / 2**30
            print(f"checkpoint: {len(shapes)} F32 tensors, {size / 2**20:.0f} MiB; "
                  f"medians of {args.runs} interleaved runs; cold materialization {cold:.2f} s")
            print(f"  private read + torch.frombuffer   {m_priv:8.3f} s  "
                  f"{gib / m_priv:6.2f} GiB/s  (reference)")
            print(f"  weightd load, every page touched  {m_touch:8.3f} s  "
                  f"{gib / m_touch:6.2f} GiB/s  {m_priv / m_touch:6.1f}x faster")
            print(f"  weightd load (map only)           {m_map:8.4f} s  "
                  f"{m_priv / m_map:8.0f}x faster")
            pss_wd, shm_wd = hold("weightd", d.sock, path, d.prefix, args.processes)
            pss_priv, _ = hold("private", d.sock, path, d.prefix, args.processes)
            one = size / 1024
            print(f"{args.processes} processes holding every tensor (pages touched), PSS summed:")
            print(f"  private copies   {pss_priv / 2**20:6.2f} GiB  (reference)")
            print(f"  weightd          {pss_wd / 2**20:6.2f} GiB  of which shared weights "
                  f"{shm_wd / 2**20:.2f} GiB = {shm_wd / one:.2f} copies; "
                  f"{pss_priv / pss_wd:.1f}x less in all")
            warm.release()
        ok = m_priv / m_touch >= 2.0 and shm_wd / one <= 1.1
        print(f"targets: warm load >= 2x the private read: {m_priv / m_touch:.1f}x; shared "
              f"weights <= 1.1 copies: {shm_wd / one:.2f} -> {'met' if ok else 'MISSED'}")
        return 0 if ok else 1
    finally:
        d.stop()
        os.unlink(path)
        os.rmdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
