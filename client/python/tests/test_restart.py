# SPDX-License-Identifier: Apache-2.0
"""Held means held, from Python: an engine process holds ten weights through weightd.Client.load
and never calls weightd again while weightd is killed and restarted and another client wants the
room; its tensors stay byte for byte what they were (sha256 before, during and after). A client
that does call again connects by itself, gets one reconnected event, and its weights are its own
again (a share works)."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import weightd
import wdtest

N = 1 << 20  # bytes per tensor

ENGINE = r"""
import hashlib, sys
import weightd
sock, talk = sys.argv[1], sys.argv[2] == "talk"
c = weightd.connect(sock, "py-engine")
sd = c.load("m", [f"a{i}" for i in range(10)], framework="numpy")
def digest():
    h = hashlib.sha256()
    for i in range(10):
        h.update(sd[f"a{i}"].tobytes())
    return h.hexdigest()
print("bound", digest(), flush=True)
for line in sys.stdin:
    if line.startswith("check"):
        print("digest", digest(), flush=True)
    elif line.startswith("talk") and talk:
        c.status(weights=False)
        ev = c.poll_events(0)
        got = [e for e in ev.events if e.reconnected]
        w = sd.weights["a0"].share()
        same = bytes(w.memoryview()) == sd["a0"].tobytes()
        w.release()
        print("talked", len(got), got[0].generation if got else -1, same, flush=True)
    else:
        break
"""


@pytest.fixture
def daemon(tmp_path, start_daemon):
    rng = np.random.default_rng(11)
    tensors = {f"{p}{i}": ("U8", [N], rng.integers(0, 256, N, dtype=np.uint8).tobytes())
               for p in "ab" for i in range(10)}
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, tensors)
    return start_daemon({"m": path}, extra="budget = 12M"), tensors


def engine(d, talk=False):
    p = subprocess.Popen([sys.executable, "-c", ENGINE, d.sock, "talk" if talk else "quiet"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=wdtest.env_for_child())
    line = p.stdout.readline().split()
    assert line[0] == "bound", line
    return p, line[1]


def ask(p, what):
    p.stdin.write(what + "\n")
    p.stdin.flush()
    return p.stdout.readline().split()


def expected(tensors):
    h = hashlib.sha256()
    for i in range(10):
        h.update(tensors[f"a{i}"][2])
    return h.hexdigest()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_engine_that_never_calls_again_keeps_its_bytes(daemon, sig):
    d, tensors = daemon
    p, d0 = engine(d)
    assert d0 == expected(tensors)
    d.restart(sig)
    assert ask(p, "check") == ["digest", d0]
    with d.connect("other") as c:
        st = c.status(weights=False)
        assert (st.locked_weights, st.locked_bytes) == (10, 10 * N)
        # the ten mapped weights count as held: the other ten do not fit in 12 MiB
        with pytest.raises(weightd.ResourceExhausted):
            c.load("m", [f"b{i}" for i in range(10)], framework="numpy")
        assert c.evict()[0] == 0
        assert ask(p, "check") == ["digest", d0]
    ask(p, "quit")
    p.wait(30)
    with d.connect("other") as c:
        for _ in range(400):
            if c.status(weights=False).locked_weights == 0:
                break
            __import__("time").sleep(0.05)
        sd = c.load("m", [f"b{i}" for i in range(10)], framework="numpy")
        assert all(sd[f"b{i}"].tobytes() == tensors[f"b{i}"][2] for i in range(10))
        sd.release()


def test_engine_that_calls_again_is_reconnected(daemon):
    d, tensors = daemon
    p, d0 = engine(d, talk=True)
    d.restart(signal.SIGKILL)
    assert ask(p, "talk") == ["talked", "1", "10", "True"]
    assert ask(p, "check") == ["digest", d0]
    with d.connect("other") as c:
        st = c.status()
        held = {w.label: w.clients for w in st.weight_list}
        assert all(held[f"m:a{i}"] == 1 for i in range(10))
    ask(p, "quit")
    p.wait(30)
