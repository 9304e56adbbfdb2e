# SPDX-License-Identifier: Apache-2.0
"""A real model: a small transformer's state dict saved with the test's own safetensors writer
and served by weightd; two processes assign() the shared tensors into a freshly built model and
run a forward pass under torch.inference_mode(). Their outputs are bit-identical to the same
model loaded privately from the file, and their parameters are weightd's shared memory."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import weightd
import weightd.torch as wtorch
import tinylm
import wdtest

CHILD = r"""
import json, os, sys
import torch
import weightd, weightd.torch as wtorch
import tinylm, wdtest
torch.set_num_threads(1)
sock, how, out_path, prefix = sys.argv[1:5]
torch.manual_seed(99 + len(how))              # different random init: assign must replace it all
model = tinylm.TinyLM().eval()
with weightd.connect(sock, "model-" + how) as c:
    if how == "load":
        sd = c.load("lm")
        bytes_read = sd.bytes_read
    else:                                     # by path, like safetensors.torch.load_file
        sd = wtorch.load_file(sys.argv[5], client=c)
        bytes_read = sd.bytes_read
    wtorch.assign(model, sd)
    pid = os.getpid()
    private = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
               if not wdtest.mapping_of(pid, t.data_ptr())[2].startswith("/dev/shm/" + prefix)]
    with torch.inference_mode():
        out = model(tinylm.tokens())
    torch.save(out, out_path)
    print(json.dumps({"private": private, "bytes_read": bytes_read}), flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def served_model(tmp_path, start_daemon):
    torch.manual_seed(7)
    model = tinylm.TinyLM().eval()
    sd = model.state_dict()
    path = str(tmp_path / "tinylm.safetensors")
    wdtest.write_safetensors(path, {k: ("F32", list(v.shape), v.contiguous().numpy().tobytes())
                                    for k, v in sd.items()})
    d = start_daemon({"lm": path})
    d.path = path
    return d


def private_output(path: str) -> torch.Tensor:
    """The same model, loaded privately from the file with the test's own reader."""
    torch.manual_seed(0)
    model = tinylm.TinyLM().eval()
    sd = {k: torch.from_numpy(np.frombuffer(raw, np.float32).reshape(shape).copy())
          for k, (dt, shape, raw) in wdtest.read_safetensors(path).items()}
    model.load_state_dict(sd)
    with torch.inference_mode():
        return model(tinylm.tokens())


def test_two_processes_run_the_shared_model_bit_identically(served_model, tmp_path):
    torch.set_num_threads(1)
    want = private_output(served_model.path)
    procs, reports, outs = [], [], []
    try:
        for how in ("load", "load_file"):
            out = str(tmp_path / f"out-{how}.pt")
            p = subprocess.Popen([wdtest.PY, "-c", CHILD, served_model.sock, how, out,
                                  served_model.prefix, served_model.path],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=wdtest.env_for_child(), cwd=wdtest.HERE)
            procs.append(p)
            line = p.stdout.readline()
            assert line, f"{how}: child failed (exit {p.wait()})"
            reports.append(json.loads(line))
            outs.append(torch.load(out))
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(60)
    assert [p.returncode for p in procs] == [0, 0]
    for r in reports:
        assert r["private"] == []                  # every parameter and buffer is shared memory
    assert reports[0]["bytes_read"] > 0 and reports[1]["bytes_read"] == 0
    for out in outs:
        assert out.dtype == torch.float32 and out.shape == want.shape
        assert out.numpy().tobytes() == want.numpy().tobytes()


def test_assign_checks_names_shapes_and_keeps_ties(served_model):
    with served_model.connect() as c:
        sd = c.load("lm")
        model = tinylm.TinyLM()
        missing, unexpected = wtorch.assign(model, sd)
        assert missing == [] and unexpected == []
        assert model.head.weight is model.tok.weight            # still tied
        assert model.tok.weight.data_ptr() == sd["tok.weight"].data_ptr()
        assert not model.tok.weight.requires_grad
        assert model.mask.data_ptr() == sd["mask"].data_ptr()
        partial = {k: v for k, v in sd.items() if k != "ln.bias"}
        with pytest.raises(KeyError, match="ln.bias"):
            wtorch.assign(tinylm.TinyLM(), partial)
        m2 = tinylm.TinyLM()
        before = m2.ln.bias
        assert wtorch.assign(m2, partial, strict=False) == (["ln.bias"], [])
        assert m2.ln.bias is before
        bad = dict(sd)
        bad["ln.weight"] = sd["ln.weight"][:10]
        with pytest.raises(ValueError, match="ln.weight"):
            wtorch.assign(tinylm.TinyLM(), bad)
        clone = {k: v.clone() for k, v in sd.items()}           # the private, writable way
        m3 = tinylm.TinyLM()
        m3.load_state_dict(clone)
        m3.ln.bias.data.add_(1.0)
        assert torch.equal(sd["ln.bias"] + 1.0, m3.ln.bias.data)


def test_load_file_by_name_and_device(served_model, monkeypatch):
    monkeypatch.setenv("WEIGHTD_SOCKET", served_model.sock)
    sd = wtorch.load_file("lm")
    ref = wdtest.read_safetensors(served_model.path)
    assert set(sd) == set(ref)
    for k, t in sd.items():
        assert t.numpy().tobytes() == ref[k][2]
    with pytest.raises(weightd.NotFound):
        wtorch.load_file(os.path.join(os.path.dirname(served_model.path), "other.safetensors"))


def test_guard_writes_raises_before_any_write(served_model):
    with served_model.connect() as c:
        sd = c.load("lm")
        model = tinylm.TinyLM().eval()
        wtorch.assign(model, sd)
        w = sd["ln.bias"]
        before = w.clone()
        private = torch.zeros(3)
        with wtorch.guard_writes():
            with torch.inference_mode():
                model(tinylm.tokens())                    # reading is untouched
            for write in (lambda: w.add_(1.0), lambda: w[1:].mul_(2.0),
                          lambda: torch.add(w, w, out=w), lambda: w.copy_(before),
                          lambda: w.__setitem__(0, 5.0), lambda: model.ln.bias.zero_(),
                          lambda: model.tok.weight.data.fill_(0.0)):
                with pytest.raises(RuntimeError, match="read-only shared memory"):
                    write()
            with torch.inference_mode():
                with pytest.raises(RuntimeError, match="read-only"):
                    model.head.weight.mul_(2.0)
            private.add_(1.0)                             # private tensors are written as usual
            w.clone().add_(1.0)
        assert torch.equal(w, before) and torch.equal(private, torch.ones(3))


def test_load_file_casts_and_assign_says_how_to(served_model, monkeypatch):
    monkeypatch.setenv("WEIGHTD_SOCKET", served_model.sock)
    ref = wdtest.read_safetensors(served_model.path)
    for dtype in (torch.bfloat16, "bf16", "BFLOAT16"):
        sd = wtorch.load_file("lm", dtype=dtype)
        assert {t.dtype for t in sd.values()} == {torch.bfloat16}, dtype
        for k, t in sd.items():
            want = torch.from_numpy(np.frombuffer(ref[k][2], np.float32).reshape(ref[k][1]))
            assert torch.equal(t, want.to(torch.bfloat16)), k
    # a float32 model: the error names the tensor and both ways to make the dtypes agree
    with pytest.raises(ValueError) as e:
        wtorch.assign(tinylm.TinyLM(), sd)
    msg = str(e.value)
    assert "torch.bfloat16" in msg and "torch.float32" in msg
    assert "dtype=torch.float32" in msg and "module.to(torch.bfloat16)" in msg
    # converting the module, the other way out, works
    model = tinylm.TinyLM().to(torch.bfloat16)
    assert wtorch.assign(model, sd) == ([], [])
    assert model.tok.weight.data_ptr() == sd["tok.weight"].data_ptr()
