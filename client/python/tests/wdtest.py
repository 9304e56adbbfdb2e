# SPDX-License-Identifier: Apache-2.0
"""Helpers of the weightd Python tests: a private weightd per test, and the tests' own
safetensors and GGUF writers (independent of weightd's code)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

import weightd

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def write_safetensors(path: str, tensors: Dict[str, Tuple[str, Sequence[int], bytes]],
                      metadata: Optional[Dict[str, str]] = None) -> None:
    """Write a safetensors file: name -> (dtype, shape, raw bytes), in the given order."""
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, (_, _, data) in tensors.items():
            f.write(data)


def read_safetensors(path: str) -> Dict[str, Tuple[str, List[int], bytes]]:
    """The test's own reader: name -> (dtype, shape, bytes)."""
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], body[a:b])
    return out


# GGUF: type numbers and block layouts of the ones the tests write
GGUF_F32, GGUF_F16, GGUF_Q4_0, GGUF_Q8_0 = 0, 1, 2, 8
GGUF_BLOCKS = {GGUF_F32: (1, 4), GGUF_F16: (1, 2), GGUF_Q4_0: (32, 18), GGUF_Q8_0: (32, 34)}


def _gguf_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: str, tensors: Dict[str, Tuple[int, Sequence[int], bytes]]) -> None:
    """Write a GGUF v3 file: name -> (ggml type, row-major shape, raw bytes). GGUF lists
    dimensions innermost first, so the shape is written reversed. Alignment 32."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1))
    out += _gguf_str("general.architecture") + struct.pack("<I", 8) + _gguf_str("test")
    off = 0
    for name, (typ, shape, data) in tensors.items():
        out += _gguf_str(name) + struct.pack("<I", len(shape))
        for d in reversed(shape):
            out += struct.pack("<Q", d)
        out += struct.pack("<IQ", typ, off)
        off += len(data) + (-len(data) % 32)
    out += b"\0" * (-len(out) % 32)
    for _, (_, _, data) in tensors.items():
        out += data + b"\0" * (-len(data) % 32)
    with open(path, "wb") as f:
        f.write(out)


class Daemon:
    """A private weightd: its own temp dir, socket, shm prefix and state dir. Ready once a
    client can connect; stopped and its /dev/shm segments removed by stop()."""

    def __init__(self, checkpoints: Dict[str, str], extra: str = "",
                 sections: str = "") -> None:
        self.dir = tempfile.mkdtemp(prefix="weightd-pytest.")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "weightd.sock")
        self.prefix = f"wdpy{os.getpid()}-{os.path.basename(self.dir).split('.')[-1]}"
        self.conf = os.path.join(self.dir, "weightd.conf")
        self.log = os.path.join(self.dir, "weightd.log")
        # one socket unless a test asks for the admin socket: the tests evict and reload
        one_socket = "" if "admin_socket" in extra else "single_socket = yes\n"
        with open(self.conf, "w") as f:
            f.write(f"[daemon]\nsocket = {self.sock}\nsocket_mode = 0666\n"
                    f"shm_prefix = {self.prefix}\nstate_dir = {self.dir}/state\nworkers = 2\n"
                    f"{one_socket}{extra}\n")
            for name, path in checkpoints.items():
                f.write(f"[checkpoint:{name}]\npath = {path}\n\n")
            f.write(sections)
        self._spawn()

    def _spawn(self) -> None:
        exe = os.environ.get("WD_WEIGHTD")
        if not exe:
            build = os.environ.get("WD_BUILD_DIR", os.path.join(HERE, "../../../build"))
            exe = os.path.join(build, "daemon", "weightd")
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([exe, "--config", self.conf, "--foreground",
                                          "--log-level", "debug"], stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=logf)
        self._wait_ready()

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """End the daemon with `sig` (SIGKILL: a crash; SIGTERM: systemctl restart) and start
        it again on the same configuration, socket and segments."""
        self.proc.send_signal(sig)
        self.proc.wait(30)
        self._spawn()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weightd exited ({self.proc.returncode}):\n{self.read_log()}")
            try:
                weightd.connect(self.sock, "readiness").close()
                return
            except weightd.Disconnected:
                if time.monotonic() > end:
                    self.stop()
                    raise RuntimeError(f"weightd not ready in {timeout} s:\n{self.read_log()}")
                time.sleep(0.02)

    def read_log(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def connect(self, name: str = "pytest") -> weightd.Client:
        return weightd.connect(self.sock, name)

    def segments(self) -> List[str]:
        return [n for n in os.listdir("/dev/shm") if n.startswith(self.prefix + ".")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for n in self.segments():
            try:
                os.unlink(os.path.join("/dev/shm", n))
            except FileNotFoundError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def default_socket_hidden() -> Iterator[None]:
    """Within the block, nothing serves weightd.DEFAULT_SOCKET for this process, even where a
    system weightd does: its directory is covered by an empty tmpfs in a mount namespace of this
    process's own, removed again at the end. Skips the test when that needs privileges this
    process lacks."""
    where = os.path.dirname(weightd.DEFAULT_SOCKET)
    if not os.path.exists(weightd.DEFAULT_SOCKET):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_rec, ms_private = 0x20000, 0x4000, 0x40000
    if (libc.unshare(clone_newns) != 0 or
            libc.mount(None, b"/", None, ms_rec | ms_private, None) != 0 or
            libc.mount(b"tmpfs", where.encode(), b"tmpfs", 0, None) != 0):
        pytest.skip(f"a weightd serves {weightd.DEFAULT_SOCKET}, and this process cannot hide "
                    f"it: {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        libc.umount2(where.encode(), 0)


def run_as(uid: int, gid: int, fn) -> int:
    """Call fn() in a forked child with uid and gid and no other groups (the test must be root):
    its exit status, 0 when fn returned, 1 when it raised (the traceback on stderr)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            fn()
            code = 0
        except BaseException:    # whatever it was (pytest.fail too), the parent sees a failure
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def env_for_child() -> Dict[str, str]:
    """The environment a child Python process needs to import the same weightd."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def shm_mappings(pid: int, prefix: str) -> List[Dict[str, Any]]:
    """The process's mappings of files under /dev/shm/<prefix>.*: start, end, dev, inode, path,
    and their Pss / Rss in KiB (from /proc/PID/smaps)."""
    out: List[Dict[str, Any]] = []
    cur: Optional[Dict[str, Any]] = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                cur = None
                path = parts[5] if len(parts) > 5 else ""
                if path.startswith(f"/dev/shm/{prefix}."):
                    a, b = parts[0].split("-")
                    cur = {"start": int(a, 16), "end": int(b, 16), "dev": parts[3],
                           "inode": int(parts[4]), "path": path, "Pss": 0, "Rss": 0}
                    out.append(cur)
            elif cur is not None and parts[0] in ("Pss:", "Rss:"):
                cur[parts[0][:-1]] = int(parts[1])
    return out


def mapping_of(pid: int, address: int) -> Tuple[str, int, str]:
    """(dev, inode, path) of the mapping that holds `address` in process `pid`."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if a <= address < b:
                return parts[3], int(parts[4]), parts[5] if len(parts) > 5 else ""
    raise LookupError(f"no mapping holds {address:#x}")


def pss_rollup_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise LookupError("no Pss")
