# SPDX-License-Identifier: Apache-2.0
"""The extension is a multi-phase module with per-module state: a second copy (re-initialised,
or in a subinterpreter) gets its own types and leaves the first one's alone, every copy raises
the one weightd.Error hierarchy of weightd.errors, and a reference cycle through the module and
the weightd objects it made is collected, letting go of what they held."""

from __future__ import annotations

import gc
import importlib.util
import time
import weakref

import numpy as np
import pytest

import weightd
import wdtest
from weightd import _weightd

A = np.arange(64, dtype=np.float32)
B = np.linspace(-1, 1, 32, dtype=np.float32)


@pytest.fixture
def daemon(tmp_path, start_daemon):
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("F32", list(A.shape), A.tobytes()),
                                    "b": ("F32", list(B.shape), B.tobytes())})
    return start_daemon({"m": path})


def fresh_copy():
    """The extension loaded again as a module object of its own (not in sys.modules)."""
    spec = importlib.util.spec_from_file_location("weightd._weightd", _weightd.__file__)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def refs(c: weightd.Client, label: str) -> int:
    for w in c.status().weight_list:
        if w.label == label:
            return w.refs
    return 0


def wait_refs(c: weightd.Client, label: str, want: int) -> int:
    """The daemon's reference count of `label` once it is `want`, or what it is after 10 s
    (a release sent on another connection is processed when the daemon reads it)."""
    deadline = time.monotonic() + 10
    while (n := refs(c, label)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


def test_types_are_per_module(daemon):
    m = fresh_copy()
    assert m is not _weightd
    for name in ("Client", "Weight", "Unit", "Request"):
        assert getattr(m, name) is not getattr(_weightd, name), name
        assert getattr(m, name).__module__ == "weightd._weightd"
    assert not hasattr(m, "_set_classes")
    assert (m.MAX_DIMS, m.DEFAULT_SOCKET) == (_weightd.MAX_DIMS, _weightd.DEFAULT_SOCKET)
    c = m.connect(daemon.sock, "copy")
    try:
        assert type(c) is m.Client
        w = c.materialize("m", "a").finish()
        # weightd.Weight derives from the package's module, not this copy: a plain m.Weight
        assert type(w) is m.Weight
        assert memoryview(w).tobytes() == A.tobytes()
        with pytest.raises(weightd.NotFound) as e:          # the package's one hierarchy
            c.materialize("m", "missing").finish()
        assert type(e.value) is weightd.errors.NotFound and e.value.tensor == "missing"
        w.release()
    finally:
        c.close()
    # the package's module is untouched by the copy
    with daemon.connect() as c:
        w = c.get("m", "b")
        assert type(w) is weightd.Weight
        np.testing.assert_array_equal(w.numpy(), B)
        with pytest.raises(weightd.NotFound):
            c.get("nope", "a")


SUBINTERPRETER = r"""
import weightd
from weightd import _weightd
assert _weightd.Client.__module__ == "weightd._weightd"
with weightd.connect(SOCK, "subinterpreter") as c:
    w = c.get("m", "a")
    assert type(w) is weightd.Weight, type(w)
    assert memoryview(w).tobytes() == EXPECTED
    try:
        c.get("m", "missing")
    except weightd.NotFound as e:
        assert e.code == "unknown-tensor", e.code
    else:
        raise AssertionError("no NotFound")
    del w
"""


def test_subinterpreters(daemon):
    interpreters = pytest.importorskip("_xxsubinterpreters")
    main_client = _weightd.Client
    code = f"SOCK = {daemon.sock!r}\nEXPECTED = {A.tobytes()!r}\n" + SUBINTERPRETER
    first, second = interpreters.create(), interpreters.create()
    try:
        interpreters.run_string(first, code)
        interpreters.run_string(second, code)     # a second module beside the first
        interpreters.run_string(first, code)      # and the first again, already imported
    finally:
        interpreters.destroy(first)    # their module state goes with them
        interpreters.destroy(second)
    # this interpreter still makes its own classes and raises its own errors
    assert _weightd.Client is main_client
    with daemon.connect() as c:
        w = c.get("m", "a")
        assert type(w) is weightd.Weight
        with pytest.raises(weightd.NotFound):
            c.get("m", "missing")
        w.release()
        assert wait_refs(c, "m:a", 0) == 0


def test_cycle_through_weightd_objects_is_collected(daemon):
    """The module copy's dict holds a weight, a unit, one of its slots, views of both weights'
    memory and a request in flight, each of which refers to its type, which refers to the
    module: a cycle only the collector can free, and only when every one of them reports its
    references, views included."""
    m = fresh_copy()
    c = m.connect(daemon.sock, "cycle")
    w = c.materialize("m", "a").finish()
    u = c.unit_from_tensors("m", ["b"])
    u.submit()
    u.validate()
    slot = u.weight("b")
    m.held = [w, memoryview(w), u, slot, memoryview(slot).cast("B"), c.materialize("m", "a"), c]
    gone = weakref.ref(m)
    del m, c, w, u, slot
    with daemon.connect() as watcher:
        gc.collect()
        gc.collect()
        assert gone() is None
        assert wait_refs(watcher, "m:a", 0) == 0
        assert wait_refs(watcher, "m:b", 0) == 0


def test_cycle_is_kept_until_collected(daemon):
    """The same cycle holds its weights while the collector has not run: what the test above
    sees freed was freed by the collector."""
    m = fresh_copy()
    c = m.connect(daemon.sock, "cycle")
    m.held = [c.materialize("m", "a").finish(), c]
    gone = weakref.ref(m)
    del m, c
    gc.disable()
    try:
        with daemon.connect() as watcher:
            assert gone() is not None
            assert refs(watcher, "m:a") == 1
            gc.collect()
            assert gone() is None
            assert wait_refs(watcher, "m:a", 0) == 0
    finally:
        gc.enable()
