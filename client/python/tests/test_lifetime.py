# SPDX-License-Identifier: Apache-2.0
"""Lifetime is reference counting: memory stays mapped while any view made from it lives (after
release(), after the client is closed), and the daemon's reference goes when the last holder
does."""

from __future__ import annotations

import ctypes
import gc
import os

import numpy as np
import pytest
import torch

import weightd
import wdtest

A = np.arange(4096 * 2, dtype=np.float32).reshape(2, 4096)
B = np.linspace(-1, 1, 300, dtype=np.float32)


@pytest.fixture
def daemon(tmp_path, start_daemon):
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("F32", list(A.shape), A.tobytes()),
                                    "b": ("F32", list(B.shape), B.tobytes())})
    d = start_daemon({"m": path})
    d.checkpoint = path
    return d


def refs(c: weightd.Client, label: str) -> int:
    """References the daemon counts on the weight `label` (0 when it holds none). Asked on the
    same connection that released, so every earlier release has been processed."""
    for w in c.status().weight_list:
        if w.label == label:
            return w.refs
    return 0


def test_views_outlive_release_and_client(daemon):
    c = daemon.connect()
    w = c.get("m", "a")
    a, t, mv = w.numpy(), w.torch(), memoryview(w)
    sd = c.load("m")
    ts = sd["b"]
    w.release()
    sd.release()
    assert w.released and w.exports == 3
    with pytest.raises(ValueError, match="released"):
        w.numpy()
    assert (w.dtype, w.shape, w.nbytes) == ("F32", A.shape, A.nbytes)   # still described
    c.close()
    del w, sd
    gc.collect()
    np.testing.assert_array_equal(a, A)
    np.testing.assert_array_equal(t.numpy(), A)
    assert mv.tobytes() == A.tobytes()
    np.testing.assert_array_equal(ts.numpy(), B)


def test_release_without_views_drops_the_daemon_reference(daemon):
    with daemon.connect() as c:
        w = c.get("m", "a")
        assert refs(c, "m:a") == 1
        # the default content digest is XXH3-128: 16 bytes, in the weight and in status alike
        st = [x for x in c.status().weight_list if x.label == "m:a"]
        assert len(w.digest) == 16 and st[0].digest == w.digest
        # the summary: the same counters, no list
        full, summary = c.status(), c.status(weights=False)
        assert summary.weight_list == [] and len(full.weight_list) == full.weights >= 1
        assert summary.weights == full.weights and summary.references == full.references >= 1
        w.release()
        assert refs(c, "m:a") == 0


def test_release_waits_for_the_last_view(daemon):
    with daemon.connect() as c:
        w = c.get("m", "a")
        a = w.numpy()
        t = w.torch()[1]          # a view of a view
        w.release()
        del w
        gc.collect()
        assert refs(c, "m:a") == 1
        del a
        gc.collect()
        assert refs(c, "m:a") == 1
        assert float(t[5]) == float(A[1, 5])
        del t
        gc.collect()
        assert refs(c, "m:a") == 0


def test_dropping_every_reference_releases(daemon):
    with daemon.connect() as c:
        t = c.get("m", "a").torch()
        assert refs(c, "m:a") == 1
        del t
        gc.collect()
        assert refs(c, "m:a") == 0


def test_unit_lives_while_a_tensor_does(daemon):
    with daemon.connect() as c:
        sd = c.load("m")
        t = sd["a"]
        assert refs(c, "m:a") == 1 and refs(c, "m:b") == 1
        sd.release()
        del sd
        gc.collect()
        assert refs(c, "m:a") == 1          # the unit is whole until its last view goes
        np.testing.assert_array_equal(t.numpy(), A)
        del t
        gc.collect()
        assert refs(c, "m:a") == 0 and refs(c, "m:b") == 0
        sd = c.load("m", framework="numpy")
        del sd
        gc.collect()
        assert refs(c, "m:a") == 0


def test_share_and_context_manager(daemon):
    with daemon.connect() as c:
        with c.get("m", "b") as w:
            w2 = w.share()
            assert w2.key == w.key and w2.digest == w.digest and w2.shape == w.shape
            assert refs(c, "m:b") == 2
        assert w.released
        assert refs(c, "m:b") == 1
        np.testing.assert_array_equal(w2.numpy(), B)
        w2.release()
        assert refs(c, "m:b") == 0


def test_numpy_refuses_writes(daemon):
    with daemon.connect() as c:
        w = c.get("m", "a")
        a = w.numpy()
        with pytest.raises(ValueError):
            a[0, 0] = 1
        with pytest.raises(ValueError):
            a.setflags(write=True)
        assert memoryview(w).readonly
        with pytest.raises(TypeError, match="not writable"):
            (ctypes.c_char * w.nbytes).from_buffer(w)   # ctypes wants a writable buffer
        np.testing.assert_array_equal(a, A)


def test_closed_client(daemon):
    c = daemon.connect()
    w = c.get("m", "b")
    c.close()
    c.close()                                  # idempotent
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.get("m", "b")
    with pytest.raises(ValueError, match="closed"):
        w.share()
    np.testing.assert_array_equal(w.numpy(), B)   # still mapped, mappable
    w.release()


def test_blocking_calls_release_the_gil(tmp_path, start_daemon):
    import threading
    big = np.random.default_rng(1).standard_normal((4096, 2048)).astype(np.float32)  # 32 MiB
    path = str(tmp_path / "big.safetensors")
    wdtest.write_safetensors(path, {"big": ("F32", list(big.shape), big.tobytes())})
    d = start_daemon({"big": path})
    count = 0
    done = threading.Event()

    def spin():
        nonlocal count
        while not done.is_set():
            count += 1

    with d.connect() as c:
        t = threading.Thread(target=spin)
        t.start()
        try:
            before = count
            w = c.get("big", "big")          # cold: the daemon reads and fills 32 MiB
            during = count - before
        finally:
            done.set()
            t.join()
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            c.get("big", "big", select={"range": [0, i, i + 1]}).numpy().copy()))
            for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert during > 0                        # the other thread ran while get() waited
    np.testing.assert_array_equal(w.numpy(), big)
    assert sorted(r.tobytes() for r in results) == sorted(big[i:i + 1].tobytes()
                                                          for i in range(8))


def test_loaded_unit_pickles_as_a_plain_dict(daemon, tmp_path):
    with daemon.connect() as c:
        sd = c.load("m")
        path = str(tmp_path / "sd.pt")
        torch.save(sd, path)
        back = torch.load(path)
        assert type(back) is dict and set(back) == {"a", "b"}
        np.testing.assert_array_equal(back["a"].numpy(), A)


def test_generation_events_and_the_new_generation(daemon, tmp_path):
    path = daemon.checkpoint
    with daemon.connect() as c, daemon.connect("admin") as admin:
        old = c.get("m", "b")
        c.subscribe(["m"])
        assert c.poll_events().events == []
        new = (B * 2).astype(np.float32)
        tmp = path + ".new"
        wdtest.write_safetensors(tmp, {"a": ("F32", list(A.shape), A.tobytes()),
                                       "b": ("F32", list(B.shape), new.tobytes())})
        os.rename(tmp, path)                          # replaced the way downloaders do
        report = admin.reload()
        assert report.warnings == []
        assert any("m" in line and "generation" in line for line in report.changes), report
        got = c.poll_events(timeout=30)
        assert got.dropped == 0
        assert [(e.checkpoint, e.what, e.generation) for e in got.events] == \
            [("m", "generation", old.generation + 1)]
        w = c.get("m", "b")
        assert w.generation == old.generation + 1 and w.key != old.key
        np.testing.assert_array_equal(w.numpy(), new)
        np.testing.assert_array_equal(old.numpy(), B)  # the old generation stays readable


def test_a_forked_child_never_releases_the_parents_references(daemon):
    with daemon.connect() as c:
        w = c.get("m", "a")
        sd = c.load("m")
        assert refs(c, "m:a") == 2
        pid = os.fork()
        if pid == 0:                      # the child: reads what it inherited, then lets go
            status = 1
            try:
                ok = w.numpy().tobytes() == A.tobytes()
                try:
                    c.get("m", "b")
                    ok = False
                except RuntimeError as e:
                    ok = ok and "forked" in str(e)
                w.release()
                sd.release()
                c.close()
                status = 0 if ok else 2
            finally:
                os._exit(status)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
        assert refs(c, "m:a") == 2        # nothing the child did reached the daemon
        np.testing.assert_array_equal(w.numpy(), A)
