# SPDX-License-Identifier: Apache-2.0
"""examples/engine.py runs against a real weightd: two runs map the same memory, the second
makes the daemon read nothing, and errors come out as one line and exit status 1."""

from __future__ import annotations

import os
import subprocess
import zlib

import numpy as np

import wdtest

ENGINE = os.path.join(wdtest.HERE, "..", "..", "..", "examples", "engine.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([wdtest.PY, ENGINE, *args], capture_output=True, text=True,
                          env=wdtest.env_for_child(), timeout=120)


def test_engine_example(tmp_path, start_daemon):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(6, dtype=np.int8)
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("F32", [3, 4], a.tobytes()),
                                    "b": ("I8", [6], b.tobytes())})
    d = start_daemon({"m": path})
    first = run("--socket", d.sock, "m")
    second = run("--socket", d.sock, "m")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    lines = first.stdout.splitlines()
    assert lines[0].startswith("a: float32[3, 4] at ")
    assert lines[0].endswith(f"crc32 {zlib.crc32(a.tobytes()):08x}")
    assert lines[1].startswith("b: int8[6] at ")
    assert lines[1].endswith(f"crc32 {zlib.crc32(b.tobytes()):08x}")
    assert lines[2] == f"2 tensors, {a.nbytes + b.nbytes} bytes; the daemon read " \
                       f"{a.nbytes + b.nbytes} checkpoint bytes"
    assert second.stdout.splitlines()[:2] == lines[:2]        # same device:inode, same bytes
    assert second.stdout.splitlines()[2].endswith("the daemon read 0 checkpoint bytes")
    half = run("--socket", d.sock, "--dtype", "F16", "--shard", "0:1:3", "m")
    assert half.returncode == 0, half.stderr
    assert half.stdout.splitlines()[0].startswith("a: float16[1, 4]")
    bad = run("--socket", d.sock, "nope")
    assert bad.returncode == 1 and "(unknown-source)" in bad.stderr
