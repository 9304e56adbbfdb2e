# SPDX-License-Identifier: Apache-2.0
"""PyTorch helpers: load a checkpoint served by weightd the way safetensors.torch.load_file
does, and put shared tensors into a module without copying them.

    from weightd.torch import load_file, assign
    sd = load_file("llama")            # instead of safetensors.torch.load_file(path)
    assign(model, sd)                  # parameters and buffers now are the shared memory
    with torch.inference_mode():
        model(x)

The tensors are read-only shared memory. torch has no read-only tensors, so an in-place write
(``add_``, ``copy_``, an optimizer step, ``load_state_dict`` into them) kills the writing process
with SIGSEGV: the kernel refuses the write, the shared weight stays intact and every other
process is unaffected. Nothing is ever changed silently. For a private, writable copy use
``tensor.clone()`` (or ``{k: v.clone() for k, v in sd.items()}`` before assign). To find such
a write without the crash, run the code under ``with guard_writes():``: any torch operation
that would write to weightd memory then raises RuntimeError naming the operation, before it
writes (this costs some microseconds per torch operation while active: for tests and debugging).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from torch.utils._python_dispatch import TorchDispatchMode

from . import Client, DType, LoadedUnit, _is_read_only, _storage_address, connect
from ._types import SourceInfo

__all__ = ["load_file", "assign", "guard_writes"]


def _checkpoint_name(client: Client, checkpoint_or_path: str) -> str:
    """A checkpoint name as is; a path -> the checkpoint the daemon serves from that file or
    directory (compared after resolving symlinks)."""
    if os.sep not in checkpoint_or_path and not os.path.exists(checkpoint_or_path):
        return checkpoint_or_path
    want = os.path.realpath(checkpoint_or_path)
    sources: List[SourceInfo] = client.list()
    for s in sources:
        if s.name == checkpoint_or_path:
            return s.name
    for s in sources:
        if os.path.realpath(s.path) == want:
            return s.name
    from .errors import NotFound
    raise NotFound(f"weightd serves no checkpoint from {checkpoint_or_path}", "not-found", 2)


def load_file(checkpoint_or_path: str, device: str = "cpu", *, dtype: Optional[DType] = None,
              client: Optional[Client] = None, socket: Optional[str] = None) -> LoadedUnit:
    """Every tensor of a checkpoint as a dict name -> torch.Tensor, shaped like
    ``safetensors.torch.load_file(filename, device="cpu")``.

    checkpoint_or_path: a checkpoint name the daemon serves, or the path of its file or
    directory. device: "cpu" maps the shared memory (no copy); any other device copies each
    tensor there (``tensor.to(device)``). dtype: cast every tensor not of it, once in the
    daemon and shared, as :meth:`weightd.Client.load` does (``torch.bfloat16``, ``"bf16"``,
    ``"F32"``...). client: an open client (default: connect to `socket`, closed again before
    returning; the tensors stay valid).
    """
    own = client is None
    c = connect(socket) if own else client
    assert c is not None
    try:
        sd = c.load(_checkpoint_name(c, checkpoint_or_path), dtype=dtype)
    finally:
        if own:
            c.close()
    if str(device) != "cpu":
        moved = LoadedUnit(sd._unit, {k: v.to(device) for k, v in sd.items()}, sd.weights)
        sd.release()
        return moved
    return sd


def _owner(module: torch.nn.Module, name: str) -> Tuple[torch.nn.Module, str]:
    parts = name.split(".")
    m = module
    for p in parts[:-1]:
        m = getattr(m, p)
    return m, parts[-1]


def assign(module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor],
           strict: bool = True) -> Tuple[List[str], List[str]]:
    """Replace `module`'s parameters and buffers by the tensors of `state_dict` without
    copying (``load_state_dict`` would copy them into private memory; ``assign=True`` exists
    only in newer torch).

    Each tensor must have the shape and dtype of what it replaces (else ValueError naming it).
    Parameters become ``nn.Parameter(tensor, requires_grad=False)``: read-only weights cannot
    be trained in place. Parameters that the module shares under two names (tied weights)
    stay shared: both names get the one new parameter. strict: raise KeyError listing missing
    and unexpected keys (else return them as ``(missing, unexpected)``).
    """
    own: Dict[str, Any] = dict(module.state_dict(keep_vars=True))
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"assign: missing keys {missing}, unexpected keys {unexpected}")
    for name, t in state_dict.items():
        if name not in own:
            continue
        old = own[name]
        if tuple(old.shape) != tuple(t.shape):
            raise ValueError(f"assign: \"{name}\" is {t.dtype}{list(t.shape)} but the module "
                             f"has {old.dtype}{list(old.shape)}")
        if old.dtype != t.dtype:
            raise ValueError(f"assign: \"{name}\" is {t.dtype}{list(t.shape)} but the module "
                             f"has {old.dtype}{list(old.shape)}: load the tensors as the "
                             f"module's dtype (load_file(..., dtype={old.dtype}) or "
                             f"Client.load(..., dtype={old.dtype}), cast once by weightd and "
                             f"shared), or convert the module first (module.to({t.dtype}))")
    replaced: Dict[int, Any] = {}
    for name, t in state_dict.items():
        if name not in own:
            continue
        old = own[name]
        owner, leaf = _owner(module, name)
        if isinstance(old, torch.nn.Parameter):
            new = replaced.get(id(old))
            if new is None:
                new = replaced[id(old)] = torch.nn.Parameter(t, requires_grad=False)
            owner._parameters[leaf] = new
        else:
            owner._buffers[leaf] = t
    # a parameter tied under a name the state dict does not list follows its twin
    for name, old in own.items():
        if name in state_dict or id(old) not in replaced:
            continue
        owner, leaf = _owner(module, name)
        owner._parameters[leaf] = replaced[id(old)]
    return missing, unexpected


class guard_writes(TorchDispatchMode):
    """Context manager: while active, a torch operation that would write to a tensor made by
    weightd (``Weight.torch()``, ``Client.load()``, ``load_file()``, and their views) raises
    RuntimeError instead of writing (which would kill the process with SIGSEGV). It checks each
    operation's arguments that the operation's schema marks as written (in-place ops, ``out=``,
    ``copy_``, indexing assignment), under ``inference_mode`` and ``no_grad`` too. Tensors made
    some other way from weightd memory (e.g. ``torch.from_numpy(w.numpy())``) are not known to
    it. Costs some microseconds per torch operation while active::

        with weightd.torch.guard_writes():
            run_step(model)          # RuntimeError: aten.add_.Tensor would write to ...
    """

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            v = args[i] if i < len(args) else kwargs.get(a.name)
            for t in (v if isinstance(v, (list, tuple)) else (v,)):
                if isinstance(t, torch.Tensor) and t.numel() and \
                        _is_read_only(_storage_address(t)):
                    raise RuntimeError(f"{func} would write to weightd's read-only shared "
                                       f"memory (argument {a.name}); clone() the tensor for a "
                                       f"private, writable copy")
        return func(*args, **kwargs)
