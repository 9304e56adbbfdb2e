# SPDX-License-Identifier: Apache-2.0
"""Errors are exceptions: each weightd.Error subclass for its case, with the protocol's code
name and the daemon's (or libweightd's) sentence."""

from __future__ import annotations

import os

import numpy as np
import pytest

import weightd
import wdtest

SMALL = np.arange(64, dtype=np.float32)
BIG = np.zeros(2 * 1024 * 1024 // 4, dtype=np.float32)    # 2 MiB, over a 1 MiB budget


@pytest.fixture
def daemon(tmp_path, start_daemon):
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"small": ("F32", [64], SMALL.tobytes()),
                                    "big": ("F32", [BIG.size], BIG.tobytes())})
    d = start_daemon({"m": path},
                     extra="budget = 1M",
                     sections=f"[checkpoint:secret]\npath = {path}\nallow_users = daemon\n")
    d.path = path
    return d


def test_not_found(daemon):
    with daemon.connect() as c:
        with pytest.raises(weightd.NotFound) as e:
            c.get("nope", "small")
        assert e.value.code == "unknown-source" and "nope" in str(e.value)
        assert e.value.checkpoint == "nope"
        with pytest.raises(weightd.NotFound) as e:
            c.get("m", "missing")
        assert e.value.code == "unknown-tensor"
        assert '"missing"' in e.value.message and e.value.tensor == "missing"
        with pytest.raises(weightd.NotFound):
            c.describe("nope")
        with pytest.raises(weightd.NotFound):
            c.load("m", tensors=["small", "missing"])


NOBODY = 65534    # a uid and gid no allow list names


@pytest.mark.skipif(os.geteuid() != 0, reason="root takes on another uid to be denied")
def test_not_readable_is_not_found(daemon):
    def denied():
        with daemon.connect() as c:
            # the same answer as for a name that is not served: nothing confirms "secret" exists
            with pytest.raises(weightd.NotFound) as e:
                c.get("secret", "small")
            assert e.value.code == "unknown-source"
            assert e.value.checkpoint == "secret"
            assert "secret" in str(e.value) and "may read" in str(e.value)
            with pytest.raises(weightd.NotFound) as other:
                c.get("secreX", "small")
            assert other.value.message.replace("secreX", "secret") == e.value.message
            assert isinstance(e.value, weightd.Error)
            assert [s.name for s in c.list()] == ["m"]   # "secret" is not listed for it

    os.chmod(daemon.dir, 0o755)    # the other uid reaches the socket
    assert wdtest.run_as(NOBODY, NOBODY, denied) == 0


def test_resource_exhausted(daemon):
    with daemon.connect() as c:
        with pytest.raises(weightd.ResourceExhausted) as e:
            c.get("m", "big")
        assert e.value.code == "resource-exhausted"
        assert "needs 2 MiB" in str(e.value)
        assert "raise `budget` in weightd.conf" in str(e.value)
        assert e.value.expected == BIG.nbytes
        np.testing.assert_array_equal(c.get("m", "small").numpy(), SMALL)   # still serving


def test_source_changed(daemon):
    with daemon.connect() as c:
        with open(daemon.path, "ab") as f:         # the file changes after admission
            f.write(b"\0" * 8)
        with pytest.raises(weightd.SourceChanged) as e:
            c.get("m", "small")
        assert e.value.code == "source-changed"
        assert daemon.path in str(e.value)


def test_invalid_argument(daemon):
    with daemon.connect() as c:
        with pytest.raises(weightd.InvalidArgument) as e:       # the daemon checks bounds
            c.get("m", "small", select={"range": [0, 0, 65]})
        assert e.value.code == "out-of-range" and "0:65" in str(e.value)
        assert e.value.axis == 0
        with pytest.raises(weightd.InvalidArgument) as e:       # a unit that does not check
            c.load_unit({"slots": [{"name": "s", "dtype": "F16", "shape": [64],
                                    "recipe": {"op": "source", "checkpoint": "m",
                                               "tensor": "small"}}]})
        assert e.value.code == "slot-mismatch" and e.value.slot == "s"
        assert "F16" in str(e.value)
        with pytest.raises(weightd.InvalidArgument) as e:       # libweightd's JSON parser
            c.get_recipe({"op": "cast", "input": {"op": "source", "checkpoint": "m",
                                                  "tensor": "small"}})
        assert e.value.code == "invalid-argument" and "dtype" in str(e.value)
        with pytest.raises(weightd.InvalidArgument) as e:
            c.load_unit({"slots": [{"name": "r", "recipe": {"op": "source", "checkpoint": "m",
                                                            "tensor": "small"}},
                                   {"name": "a", "alias": "b"}, {"name": "b", "alias": "a"}]})
        assert e.value.code == "alias-cycle" and e.value.slot in ("a", "b")


def test_disconnected(tmp_path):
    with pytest.raises(weightd.Disconnected) as e:
        weightd.connect(str(tmp_path / "no.sock"))
    assert e.value.code == "disconnected" and "no.sock" in str(e.value)


def test_default_socket_comes_from_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("WEIGHTD_SOCKET", daemon.sock)
    with weightd.connect() as c:
        # root sees every checkpoint, "secret" too, whatever its allow list says
        expect = ["m", "secret"] if os.geteuid() == 0 else ["m"]
        assert [s.name for s in c.list()] == expect
    monkeypatch.setenv("WEIGHTD_SOCKET", "")
    with wdtest.default_socket_hidden(), pytest.raises(weightd.Error) as e:
        weightd.connect()
    assert weightd.DEFAULT_SOCKET in str(e.value)


def test_python_arguments_are_checked_before_the_call(daemon):
    with daemon.connect() as c:
        with pytest.raises(OverflowError):
            c.get("m", "small", select={"range": [0, -1, 5]})      # never wrapped to 2**64-1
        with pytest.raises(OverflowError):
            c.get("m", "small", select={"shard": [2**32, 0, 1]})
        with pytest.raises(ValueError, match="unknown selection kind"):
            c.get("m", "small", select={"slice": [0, 1]})
        with pytest.raises(TypeError):
            c.get("m", "small", select=[0, 1])
        with pytest.raises(ValueError, match="framework"):
            c.load("m", framework="jax")
        np.testing.assert_array_equal(c.get("m", "small", select={"indices": [0, [3, 1]]})
                                      .numpy(), SMALL[[3, 1]])


def test_load_of_whole_tensors_names_what_is_wrong(daemon):
    """load() without a cast or shard declares its slots in C, not through JSON: the same
    errors, and the same unit."""
    with daemon.connect() as c:
        assert c._c.tensor_names("m") == [t.name for t in c.describe("m").tensors]
        with pytest.raises(weightd.InvalidArgument) as e:
            c.load("m", tensors=["small", "small"])
        assert e.value.code == "duplicate-name" and '"small"' in str(e.value)
        with pytest.raises(TypeError):
            c.load("m", tensors=["small", 3])
        with pytest.raises(weightd.NotFound):
            c.load("nope")
        sd = c.load("m", tensors=["small"], framework="numpy")
        assert list(sd) == ["small"]
        np.testing.assert_array_equal(sd["small"], SMALL)


def test_every_code_name_the_classes_list_is_a_code_of_libweightd():
    """errors.py classifies codes by name: a name no code has (a typo, a renamed code) would
    leave that code raising the bare weightd.Error."""
    from weightd import _weightd, errors
    names = {_weightd.code_name(n) for n in range(256)} - {"unknown-error"}
    assert len(names) >= 30
    assert set(errors._BY_CODE) <= names
    # the recipe checks added last are invalid arguments like the others
    assert errors.error_class("scale-mismatch") is weightd.InvalidArgument
    assert errors.error_class("slot-mismatch") is weightd.InvalidArgument
