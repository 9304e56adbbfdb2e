# SPDX-License-Identifier: Apache-2.0
"""Two separate Python processes load the same checkpoint: they map the same shared memory
(device and inode), the second makes the daemon read nothing, the bytes are the file's, and
together they hold about one copy (PSS). Writes through numpy raise; an in-place torch write
kills only the writer and leaves the shared weight intact."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess

import numpy as np
import pytest

import weightd
import wdtest

CHILD = r"""
import hashlib, json, sys
import weightd, wdtest
sock = sys.argv[1]
with weightd.connect(sock, "child") as c:
    sd = c.load("m")
    out = {"bytes_read": sd.bytes_read, "tensors": {}}
    for name, t in sd.items():
        dev, ino, path = wdtest.mapping_of(__import__("os").getpid(), t.data_ptr())
        a = sd.weights[name].numpy()
        try:
            a[0, 0] = 1
            wrote = "no error"
        except ValueError as e:
            wrote = "ValueError"
        out["tensors"][name] = {"dev": dev, "ino": ino, "path": path, "dtype": str(t.dtype),
                                "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
                                "numpy_write": wrote}
    print(json.dumps(out), flush=True)
    sys.stdin.readline()            # hold everything until the parent has measured
"""

WRITER = r"""
import sys, weightd
with weightd.connect(sys.argv[1], "writer") as c:
    t = c.load("m")["a"]
    print("loaded", flush=True)
    t.add_(1.0)                     # an in-place write to read-only shared memory
    print("wrote", flush=True)
"""

N = 1024


@pytest.fixture
def daemon(tmp_path, start_daemon):
    rng = np.random.default_rng(5)
    tensors = {n: ("F32", [N, N], rng.standard_normal((N, N)).astype(np.float32).tobytes())
               for n in ("a", "b")}
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, tensors)
    d = start_daemon({"m": path})
    d.tensors = tensors
    return d


def spawn(script: str, sock: str) -> subprocess.Popen:
    env = wdtest.env_for_child()
    # under AddressSanitizer (sanitizer builds), let the fault be the process's own SIGSEGV
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":handle_segv=0"
    return subprocess.Popen([wdtest.PY, "-c", script, sock], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, cwd=wdtest.HERE)


def test_two_processes_share_one_copy(daemon):
    total = sum(len(t[2]) for t in daemon.tensors.values())
    procs = []
    try:
        reports = []
        for _ in range(2):
            p = spawn(CHILD, daemon.sock)
            procs.append(p)
            line = p.stdout.readline()
            assert line, f"child failed (exit {p.wait()})"
            reports.append(json.loads(line))
        first, second = reports
        assert first["bytes_read"] == total      # the first load read the checkpoint once
        assert second["bytes_read"] == 0         # the second read nothing
        for name, (_, _, raw) in daemon.tensors.items():
            a, b = first["tensors"][name], second["tensors"][name]
            assert (a["dev"], a["ino"]) == (b["dev"], b["ino"])
            assert a["path"].startswith(f"/dev/shm/{daemon.prefix}.")
            assert a["sha256"] == b["sha256"] == hashlib.sha256(raw).hexdigest()
            assert a["dtype"] == "torch.float32"
            assert a["numpy_write"] == b["numpy_write"] == "ValueError"
        # both touched every page; the kernel splits each shared page between its mappers (the
        # daemon too, if it maps segments), so together they account for one copy
        maps = [wdtest.shm_mappings(p.pid, daemon.prefix) for p in procs]
        rss = [sum(m["Rss"] for m in ms) for ms in maps]
        pss = [sum(m["Pss"] for m in ms) for ms in maps]
        pss_daemon = sum(m["Pss"] for m in wdtest.shm_mappings(daemon.proc.pid, daemon.prefix))
        one_copy_kb = total // 1024
        assert all(r >= one_copy_kb for r in rss), rss
        assert abs(sum(pss) + pss_daemon - one_copy_kb) <= one_copy_kb * 0.05 + 64, \
            (pss, pss_daemon, one_copy_kb)
        print(f"shm Pss {pss} KiB + daemon {pss_daemon} KiB (one copy {one_copy_kb} KiB); "
              f"process Pss {[wdtest.pss_rollup_kb(p.pid) for p in procs]} KiB")
        with daemon.connect() as c:
            assert c.status().bytes_read == total
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(60)
    assert [p.returncode for p in procs] == [0, 0]


def test_in_place_torch_write_kills_only_the_writer(daemon):
    p = spawn(WRITER, daemon.sock)
    out, _ = p.communicate(timeout=120)
    assert out.splitlines() == ["loaded"]          # it never got past the write
    assert p.returncode == -signal.SIGSEGV
    with daemon.connect() as c:                     # the shared weight is intact
        w = c.get("m", "a")
        assert w.numpy().tobytes() == daemon.tensors["a"][2]
