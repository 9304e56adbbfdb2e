# SPDX-License-Identifier: Apache-2.0
"""weightd: bind model weights served by the weightd daemon, with zero copies.

weightd reads each weight of a checkpoint once into POSIX shared memory; every process that asks
maps that same read-only memory. This package is libweightd's Python binding::

    import weightd
    with weightd.connect() as c:          # $WEIGHTD_SOCKET or the system socket
        sd = c.load("llama")              # dict[str, torch.Tensor], bound all-or-nothing
        w = c.get("llama", "model.embed_tokens.weight", select={"range": [0, 0, 1024]})
        a = w.numpy()                     # read-only ndarray over the shared memory

Memory stays mapped while anything made from it (memoryview, ndarray, tensor) is alive, even after
``release()`` or the client is closed: releasing is reference counting. The memory is read-only:
numpy refuses writes; torch has no read-only tensors, and an in-place write to a weightd tensor
kills the writing process with SIGSEGV (the kernel refuses the write; the shared weight and every
other process are unaffected). ``tensor.clone()`` gives a private, writable copy, and
``weightd.torch.guard_writes()`` turns such writes into RuntimeError while debugging.
"""

from __future__ import annotations

import asyncio
import json
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _weightd
from ._dtypes import dtype_name, is_packed, numpy_dtype, torch_dtype
from ._types import (ClientInfo, Description, Event, Events, JobStatus, MetaEntry, ReloadReport,
                     ServerInfo, SourceInfo, Status, TensorInfo, WeightStatus, _description,
                     _status)
from .errors import (Disconnected, Error, InvalidArgument, NotFound, PermissionDenied,
                     ResourceExhausted, SourceChanged)

__all__ = [
    "connect", "Client", "Weight", "LoadedUnit", "Error", "NotFound", "PermissionDenied",
    "ResourceExhausted", "SourceChanged", "InvalidArgument", "Disconnected", "ServerInfo",
    "SourceInfo", "TensorInfo", "MetaEntry", "Description", "WeightStatus", "JobStatus",
    "Status", "ClientInfo", "Event", "Events", "ReloadReport", "numpy_dtype", "torch_dtype", "dtype_name", "is_packed",
    "DEFAULT_SOCKET", "__version__",
]

__version__ = "0.1.0"
DEFAULT_SOCKET: str = _weightd.DEFAULT_SOCKET

Selection = Union[None, str, Mapping[str, Any], Tuple[Any, ...]]
Recipe = Union[str, Mapping[str, Any]]
# (axis, rank, world), or (axis, rank, world, True) for the even split only
ShardOf = Union[Tuple[int, int, int], Tuple[int, int, int, bool]]
Shard = Union[None, ShardOf, Mapping[str, Optional[ShardOf]],
              Callable[[TensorInfo], Optional[ShardOf]]]
# a weightd dtype name or alias ("BF16", "bf16", "float16"...), a torch.dtype or a numpy dtype
DType = Any

_NOT_WRITABLE = "The given buffer is not writable"


class Weight(_weightd.Weight):
    """A weight this process holds: its description and its read-only shared memory.

    Attributes (all read-only): ``name`` (tensor or slot name), ``dtype`` (weightd's name, e.g.
    ``"BF16"``, ``"Q4_0"``), ``shape`` (tuple, outermost axis first), ``nbytes``, ``digest``
    (content digest, bytes), ``key`` (identity, bytes: equal keys, same bytes, same memory),
    ``generation`` (of its checkpoint), ``handle``, ``slot`` (unit slot name or None),
    ``released``, ``exports`` (live views of its memory).

    The object supports the buffer protocol (read-only, with the dtype's format, shape and
    strides; BF16 as uint16 bits, FP8 as uint8 bits; packed block types as bytes per row), so
    ``memoryview(w)`` and ``numpy.asarray(w)`` work. Use it as a context manager to release it.
    """

    __slots__ = ("__weakref__",)

    def memoryview(self) -> memoryview:
        """A read-only memoryview of the weight (keeps the memory mapped while it lives)."""
        # type checkers before PEP 688 (Python 3.12) know no buffer protocol of other classes
        return memoryview(self)  # type: ignore[arg-type]

    @property
    def buffer_shape(self) -> Tuple[int, ...]:
        """The shape of the buffer: `shape` for element types; for packed block types the outer
        axes and then the bytes of one row."""
        return tuple(self.memoryview().shape or ())

    def numpy(self) -> Any:
        """A read-only numpy array over the shared memory, no copy.

        dtype per :func:`weightd.numpy_dtype` (BF16 -> uint16 bits, FP8 -> uint8 bits, packed
        block types -> uint8 rows). Writing to it raises ValueError; ``.copy()`` for a private
        one. The memory stays mapped while the array (or any view of it) lives."""
        import numpy as np
        a: Any = np.asarray(self.memoryview())  # type: ignore[arg-type]
        dt = numpy_dtype(self.dtype)
        if a.dtype != dt:
            a = a.view(dt)
        return a

    def torch(self) -> Any:
        """A CPU tensor over the shared memory, no copy, of the matching torch dtype
        (:func:`weightd.torch_dtype`: bfloat16 for BF16; float8 types where this torch has them,
        else uint8 bits; packed block types as uint8 rows).

        torch has no read-only tensors: an in-place write to this tensor kills the process with
        SIGSEGV (the memory is mapped read-only; nothing shared is changed). ``.clone()`` gives
        a private, writable copy. The memory stays mapped while the tensor (or a view) lives."""
        import torch
        with warnings.catch_warnings():
            # weightd's memory is read-only on purpose; torch warns about any such buffer
            warnings.filterwarnings("ignore", message=_NOT_WRITABLE)
            return _torch_view(self, torch)

    def share(self) -> "Weight":
        """Another reference to the same memory, counted by the daemon (one round trip, no copy,
        no read). Released on its own."""
        return super().share()

    def __enter__(self) -> "Weight":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<weightd.Weight {self.name!r} {self.dtype}{list(self.shape)} "
                f"{self.nbytes} bytes gen {self.generation}{state}>")



def _torch_view(w: Weight, torch: Any) -> Any:
    """Weight.torch() inside the caller's warning filter: a unit's tensors share one, because
    setting it up per tensor (catch_warnings, a compiled pattern) cost several times the tensor
    itself, seconds for a 90,000-tensor checkpoint."""
    dt = torch_dtype(w.dtype, torch)
    if w.nbytes == 0:
        return torch.empty(w.buffer_shape, dtype=dt)
    mv = w.memoryview()
    t = torch.frombuffer(mv, dtype=dt)
    _register_read_only(_storage_address(t), w)
    return t.view(tuple(mv.shape or ()))

# Storage addresses of the torch tensors made from weights -> the weight (weakly: a weight lives
# exactly as long as a view of it does). weightd.torch.guard_writes() looks tensors up here.
_read_only: Dict[int, "weakref.ref[Weight]"] = {}


def _register_read_only(address: int, w: Weight) -> None:
    def gone(ref: "weakref.ref[Weight]", address: int = address) -> None:
        if _read_only.get(address) is ref:
            del _read_only[address]
    _read_only[address] = weakref.ref(w, gone)


def _storage_address(t: Any) -> int:
    """Where a tensor's storage starts (shared by all its views)."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # torch 2 / 1.13
    return int(st.data_ptr())


def _is_read_only(address: int) -> bool:
    ref = _read_only.get(address)
    return ref is not None and ref() is not None


class LoadedUnit(Dict[str, Any]):
    """What Client.load() and load_unit() return: a dict of slot name -> tensor (or ndarray, or
    Weight), bound all-or-nothing, plus

    - ``bytes_read``: checkpoint bytes the daemon read to answer (0: everything was shared);
    - ``weights``: slot name -> :class:`Weight`;
    - ``release()``: let go of the unit. Tensors still alive keep their memory mapped; the
      daemon's references go when the last of them does.
    """

    def __init__(self, unit: Any, items: Dict[str, Any], weights: Dict[str, Weight]) -> None:
        super().__init__(items)
        self._unit = unit
        self.bytes_read: int = unit.bytes_read
        self.weights: Dict[str, Weight] = weights

    def __reduce__(self) -> Any:
        # pickled (torch.save) as the plain dict of its tensors, which torch copies
        return (dict, (dict(self),))

    def release(self) -> None:
        """Drop this dict's hold on the unit (see the class documentation)."""
        self._unit.release()
        for w in self.weights.values():
            w.release()


def _selection(select: Selection) -> Optional[Tuple[Any, ...]]:
    """Normalise a selection: None / "full" / a dict in the JSON recipe form
    ({"range": [axis, start, end]}, {"indices": [axis, [i...]]}, {"elements": [start, end,
    shape]}, {"shard": [axis, rank, world]}) / a tuple ("range", axis, start, end)."""
    if select is None:
        return None
    if isinstance(select, str):
        if select != "full":
            raise ValueError(f"unknown selection {select!r} (a string selection is \"full\")")
        return ("full",)
    if isinstance(select, tuple):
        return select
    if isinstance(select, Mapping) and len(select) == 1:
        (kind, args), = select.items()
        return (kind, *args)
    raise TypeError("select must be None, \"full\", a one-key dict like {\"range\": [0, 0, 8]}"
                    " or a tuple like (\"range\", 0, 0, 8)")


def _recipe_json(recipe: Recipe) -> str:
    return recipe if isinstance(recipe, str) else json.dumps(recipe)


class _Poller:
    """Completes asyncio futures of a client's in-flight requests when its socket is readable.
    A timer re-polls as well, since a thread blocked in the library may read the reply first."""

    def __init__(self, client: "Client", loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop
        self.pending: List[Tuple[Callable[[], bool], Callable[[], Any], asyncio.Future]] = []
        self.timer: Optional[asyncio.TimerHandle] = None
        self.fd = -1

    def add(self, poll: Callable[[], bool], finish: Callable[[], Any],
            fut: asyncio.Future) -> None:
        if not self.pending:
            self.fd = self.client.fileno()
            self.loop.add_reader(self.fd, self.check)
            self.timer = self.loop.call_later(0.05, self.tick)
        self.pending.append((poll, finish, fut))
        self.loop.call_soon(self.check)

    def tick(self) -> None:
        self.timer = None
        self.check()
        if self.pending:
            self.timer = self.loop.call_later(0.05, self.tick)

    def check(self) -> None:
        left = []
        for poll, finish, fut in self.pending:
            if fut.done():
                continue
            try:
                if not poll():
                    left.append((poll, finish, fut))
                    continue
                fut.set_result(finish())
            except BaseException as e:  # the request's own error goes to its awaiter
                fut.set_exception(e)
        self.pending = left
        if not left:
            self.stop()

    def stop(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.fd = -1
        if self.timer:
            self.timer.cancel()
            self.timer = None

    def fail_all(self, exc: BaseException) -> None:
        self.stop()
        for _, _, fut in self.pending:
            if not fut.done():
                fut.set_exception(exc)
        self.pending = []


class Client:
    """A connection to weightd. Made by :func:`connect`; a context manager that closes it.

    Every call that waits for the daemon releases the GIL, so other threads run meanwhile, and a
    client may be used from several threads at once. The ``a``-prefixed methods are asyncio
    forms built on the client's socket: they send at once and complete when the reply comes, so
    a server can load while it serves.
    """

    def __init__(self, socket: Optional[str] = None, name: Optional[str] = None) -> None:
        """Connect (see :func:`connect`)."""
        self._c = _weightd.connect(socket, name)
        self._pollers: Dict[asyncio.AbstractEventLoop, _Poller] = {}

    # -- connection -----------------------------------------------------------------------
    @property
    def server_info(self) -> ServerInfo:
        """What the daemon said in its hello (versions, instance, limits)."""
        return ServerInfo(**self._c.server_info())

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return bool(self._c.closed)

    def fileno(self) -> int:
        """The connection's socket, for an event loop (never read or close it yourself)."""
        return int(self._c.fileno())

    def close(self) -> None:
        """Close the connection. Weights, tensors and arrays already received stay valid; their
        daemon references go with the connection. Pending asyncio requests fail with
        :class:`Disconnected`. A call still running in another thread finishes first: the
        connection closes when it returns (new calls are refused at once). Idempotent."""
        for p in self._pollers.values():
            p.fail_all(Disconnected("the weightd client was closed", "disconnected", 12))
        self._pollers.clear()
        self._c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- queries --------------------------------------------------------------------------
    def list(self) -> List[SourceInfo]:
        """Every checkpoint this client may see."""
        return [SourceInfo(**s) for s in self._c.list()]

    def describe(self, checkpoint: str) -> Description:
        """A checkpoint's tensor table and metadata (NotFound when there is no such
        checkpoint)."""
        return _description(self._c.describe(checkpoint))

    def status(self, weights: bool = True) -> Status:
        """The daemon's counters, sources, weights (with their reference counts) and jobs.

        weights=False leaves the list of weights out (``Status.weight_list`` empty; the counters
        stay): for monitoring, cheap however many weights the daemon caches."""
        return _status(self._c.status(weights))

    def clients(self) -> List[ClientInfo]:
        """The connections the daemon serves and what each holds: every one when this client
        is on the admin socket, those of its own uid otherwise."""
        return [ClientInfo(**x) for x in self._c.clients()]

    def reload(self) -> ReloadReport:
        """Ask the daemon to re-read its configuration (an administrative request: on the admin
        socket, or as root or weightd's user with single_socket = yes). Returns what it
        applied and, in ``warnings``, what it could not (keys that need a restart, checkpoints
        whose changed files were refused); a reload that failed raises."""
        r = self._c.reload()
        return ReloadReport(list(r["changes"]), list(r["warnings"]))

    def evict(self) -> Tuple[int, int]:
        """Evict every weight no client holds (privileged). Returns (weights, bytes)."""
        n, b = self._c.evict()
        return int(n), int(b)

    # -- generation events ----------------------------------------------------------------
    def subscribe(self, checkpoints: Iterable[str]) -> None:
        """Be told when these checkpoints get a new generation (their files changed and the
        daemon reloaded) or are removed. Replaces the previous subscription; an empty list
        unsubscribes. Collect the events with poll_events()."""
        self._c.subscribe(list(checkpoints))

    def poll_events(self, timeout: Optional[float] = 0.0) -> Events:
        """Events queued since the last poll, waiting up to `timeout` seconds (None: until one
        comes) when none is queued. Blocks without the GIL."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        events, dropped = self._c.poll_events(ms)
        return Events([Event(**e) for e in events], int(dropped))

    # -- single weights -------------------------------------------------------------------
    def get(self, checkpoint: str, tensor: str, select: Selection = None) -> Weight:
        """One source tensor, or the part `select` names (see docs/recipes.md for selections:
        ``{"range": [axis, start, end]}``, ``{"indices": [axis, [i, ...]]}``,
        ``{"elements": [start, end, shape]}``, ``{"shard": [axis, rank, world]}``)."""
        return self._c.materialize(checkpoint, tensor, _selection(select)).finish()

    def get_recipe(self, recipe: Recipe) -> Weight:
        """The output of a recipe, given as a dict in the JSON recipe form or a JSON string,
        e.g. ``{"op": "cast", "dtype": "F16", "input": {"op": "source", "checkpoint": "m",
        "tensor": "w"}}``."""
        return self._c.materialize_recipe(_recipe_json(recipe)).finish()

    async def aget(self, checkpoint: str, tensor: str, select: Selection = None) -> Weight:
        """get() for asyncio."""
        req = self._c.materialize(checkpoint, tensor, _selection(select))
        return await self._await(req.poll, req.finish, req.cancel)

    async def aget_recipe(self, recipe: Recipe) -> Weight:
        """get_recipe() for asyncio."""
        req = self._c.materialize_recipe(_recipe_json(recipe))
        return await self._await(req.poll, req.finish, req.cancel)

    async def _await(self, poll: Callable[[], bool], finish: Callable[[], Any],
                     cancel: Callable[[], None]) -> Any:
        loop = asyncio.get_running_loop()
        p = self._pollers.get(loop)
        if p is None:
            p = self._pollers[loop] = _Poller(self, loop)
        fut = loop.create_future()
        p.add(poll, finish, fut)
        try:
            return await fut
        except asyncio.CancelledError:
            cancel()
            raise

    # -- units ----------------------------------------------------------------------------
    def load(self, checkpoint: str, tensors: Optional[Iterable[str]] = None,
             dtype: Optional[DType] = None, shard: Shard = None,
             framework: str = "torch", populate: bool = False) -> LoadedUnit:
        """Bind a set of tensors of `checkpoint` all-or-nothing (one unit) and return them as
        a dict name -> tensor.

        tensors: names (default: every tensor, in file order). dtype: the dtype to cast every
        tensor to that is not already of it, done once by the daemon and shared (packed GGUF
        types are dequantized): a torch.dtype (``torch.bfloat16``), a numpy dtype, or a name,
        weightd's or a common alias in any case (``"BF16"``, ``"bf16"``, ``"float16"``,
        ``"fp16"``, ``"f32"``...; see :func:`weightd.dtype_name`). shard: (axis, rank, world)
        for every tensor, or a dict name -> (axis, rank, world) or None, or a callable
        TensorInfo -> (axis, rank, world) or None; torch.tensor_split's rule (7 rows over 3
        ranks: 3, 2, 2). (axis, rank, world, True) is the strict rule of vLLM and Megatron: an
        axis that does not divide by world is refused (InvalidArgument,
        code "shape-mismatch"). framework:
        "torch" (CPU tensors), "numpy" (read-only arrays) or "weight" (:class:`Weight`
        objects). populate: pre-fault every page of the tensors before returning (one batch
        of page faults now instead of one per few pages on first use; advisory: if the kernel
        refuses, the pages fault in on first use as without it).
        """
        _check_framework(framework)
        try:
            unit = self._load_unit(checkpoint, tensors, dtype, shard)
            return self._bind(unit, framework, populate)
        except InvalidArgument as e:
            said = self._load_error(checkpoint, shard, e)
            if said is e:
                raise
            raise said from None

    async def aload(self, checkpoint: str, tensors: Optional[Iterable[str]] = None,
                    dtype: Optional[DType] = None, shard: Shard = None,
                    framework: str = "torch", populate: bool = False) -> LoadedUnit:
        """load() for asyncio (the describe() it may need is a short blocking call)."""
        _check_framework(framework)
        try:
            unit = self._load_unit(checkpoint, tensors, dtype, shard)
            return await self._abind(unit, framework, populate)
        except InvalidArgument as e:
            said = self._load_error(checkpoint, shard, e)
            if said is e:
                raise
            raise said from None

    def _bind(self, unit: Any, framework: str, populate: bool) -> LoadedUnit:
        unit.submit()
        unit.validate(populate=populate)
        return _loaded(unit, framework)

    async def _abind(self, unit: Any, framework: str, populate: bool) -> LoadedUnit:
        unit.submit()
        await self._await(unit.poll, lambda: None, unit.release)
        # the reply is there: only checks and maps (and pre-faults, with populate)
        unit.validate(populate=populate)
        return _loaded(unit, framework)

    def _load_unit(self, checkpoint: str, tensors: Optional[Iterable[str]],
                   dtype: Optional[DType], shard: Shard) -> Any:
        """The unit load() binds, declared in the extension: each tensor, or its shard, cast
        where it is not already `dtype` (the recipes the JSON unit form would give, without
        building and parsing 90,000 slots of JSON)."""
        if dtype is not None:
            dtype = dtype_name(dtype)
        infos: Dict[str, TensorInfo] = {}
        if dtype is not None or callable(shard) or (tensors is None and shard is not None):
            infos = {t.name: t for t in self.describe(checkpoint).tensors}
            names = list(infos) if tensors is None else list(tensors)
        else:
            names = self._c.tensor_names(checkpoint) if tensors is None else list(tensors)
        sels: Optional[List[Optional[Tuple[Any, ...]]]] = None
        if shard is not None:
            sels = []
            for name in names:
                sh: Optional[ShardOf]
                if isinstance(shard, tuple):
                    sh = shard
                elif isinstance(shard, Mapping):
                    sh = shard.get(name)
                else:
                    info = infos.get(name)
                    if info is None:
                        raise NotFound(f"{checkpoint} has no tensor \"{name}\"", "unknown-tensor",
                                       21, checkpoint, name)
                    sh = shard(info)
                sels.append(None if sh is None else ("shard", *sh))
        casts = None if dtype is None else [
            dtype if name not in infos or infos[name].dtype != dtype else None for name in names]
        return self._c.unit_from_tensors(checkpoint, names, sels, casts)

    def _load_error(self, checkpoint: str, shard: Shard, e: InvalidArgument) -> InvalidArgument:
        """The error of a load() in its caller's words: the daemon checks a shard as the
        selection of a recipe's source node, which the caller of load() never wrote. Any other
        error is returned as it is."""
        name = e.tensor or e.slot
        if shard is None or e.code != "axis-out-of-range" or not name or e.axis < 0:
            return e
        try:
            info = next((t for t in self.describe(checkpoint).tensors if t.name == name), None)
        except Error:
            info = None
        if info is None:
            return e
        ndim = len(info.shape)
        if isinstance(shard, tuple):
            given = f"shard={shard!r}"
        elif isinstance(shard, Mapping):
            given = f"shard={{..., {name!r}: {shard.get(name)!r}}}"
        else:
            given = "shard=..."
        axes = "no axis" if ndim == 0 else "1 axis" if ndim == 1 else f"{ndim} axes"
        on = "" if ndim == 0 else "shard it on axis 0, or " if ndim == 1 else \
            f"shard it on an axis from 0 to {ndim - 1}, or "
        msg = (f"load({checkpoint!r}, {given}): tensor \"{name}\" has shape {list(info.shape)} "
               f"({axes}), so it cannot be split on axis {e.axis}; {on}leave it whole (None "
               f"for it in a dict or callable shard=)")
        return InvalidArgument(msg, e.code, e.number, e.checkpoint or checkpoint, name, e.slot,
                               0, e.axis, e.expected, e.actual)

    def load_unit(self, spec: Recipe, framework: str = "torch",
                  populate: bool = False) -> LoadedUnit:
        """Bind a unit given in the JSON unit form (a dict or a JSON string)::

            {"slots": [{"name": "q", "dtype": "F16", "shape": [512, 4096], "recipe": R},
                       {"name": "wte", "recipe": R},
                       {"name": "lm_head", "alias": "wte"}]}

        or a single recipe (one slot named "output"). All-or-nothing: on error nothing is held.
        An alias is the same memory as its target. populate: as for load()."""
        _check_framework(framework)
        unit = self._c.unit_from_json(_recipe_json(spec))
        return self._bind(unit, framework, populate)

    async def aload_unit(self, spec: Recipe, framework: str = "torch",
                         populate: bool = False) -> LoadedUnit:
        """load_unit() for asyncio."""
        _check_framework(framework)
        unit = self._c.unit_from_json(_recipe_json(spec))
        return await self._abind(unit, framework, populate)


def _check_framework(framework: str) -> None:
    if framework not in ("torch", "numpy", "weight"):
        raise ValueError(f"framework must be \"torch\", \"numpy\" or \"weight\", not "
                         f"{framework!r}")


def _loaded(unit: Any, framework: str) -> LoadedUnit:
    weights: Dict[str, Weight] = {s: unit.weight(s) for s in unit.slots()}
    items: Dict[str, Any]
    if framework == "torch":
        import torch
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NOT_WRITABLE)
            items = {s: _torch_view(w, torch) for s, w in weights.items()}
    elif framework == "numpy":
        items = {s: w.numpy() for s, w in weights.items()}
    else:
        items = dict(weights)
    return LoadedUnit(unit, items, weights)


def connect(socket: Optional[str] = None, name: Optional[str] = None) -> Client:
    """Connect to weightd and say hello.

    socket: the daemon's socket path; None means ``$WEIGHTD_SOCKET``, or
    ``/run/weightd/weightd.sock`` when that is unset or empty. name: shows up in the daemon's
    logs and status. Raises :class:`Disconnected` when nothing listens there,
    :class:`PermissionDenied` when the socket's mode refuses this process. Blocks without the
    GIL."""
    return Client(socket, name)
