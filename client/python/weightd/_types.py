# SPDX-License-Identifier: Apache-2.0
"""Plain records returned by Client.list(), describe(), status() and server_info."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ServerInfo", "SourceInfo", "TensorInfo", "MetaEntry", "Description",
           "WeightStatus", "JobStatus", "Status", "Event", "Events"]


@dataclass(frozen=True)
class ServerInfo:
    """What the daemon said when the client connected (its hello)."""
    protocol_version: int
    server_version: str
    instance: str
    max_frame_bytes: int
    max_pending_requests: int
    max_unit_entries: int
    max_recipe_nodes: int
    max_client_bytes: int    #: 0: no limit
    max_client_weights: int  #: 0: no limit
    # Below: 0 from a daemon that does not say (an older weightd).
    min_protocol_version: int  #: the daemon's range of protocol versions
    max_protocol_version: int
    max_queue_fds: int         #: fds of unread replies before the daemon stops reading us
    idle_timeout_ms: int       #: a connection holding nothing is closed after this (0: never)
    frame_timeout_ms: int      #: a request must arrive whole within this (0: no limit)
    max_message_bytes: int     #: largest request (its frames joined)
    segment_max_bytes: int     #: how much the daemon packs into one shared-memory segment
    max_client_segments: int   #: segments one connection may hold weights in
    max_uid_segments: int      #: the same over all connections of our uid
    max_uid_weights: int       #: weights held over all connections of our uid


@dataclass(frozen=True)
class SourceInfo:
    """A checkpoint the daemon serves."""
    name: str
    kind: str            #: "safetensors", "safetensors-sharded" or "gguf"
    path: str
    tensors: int
    bytes: int           #: payload bytes of all its tensors
    generation: int      #: grows when its files change and the daemon reloads
    state: str           #: "ready", "failed" or "removed"
    error: str           #: why it failed ("" when ready)
    files: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint, as stored."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    offset: int          #: absolute offset in `file`
    file: str
    block_elems: int     #: elements per block: 1 for element types, e.g. 32 for Q4_0
    block_bytes: int     #: bytes per block (the element size for element types)


@dataclass(frozen=True)
class MetaEntry:
    """One metadata entry of a checkpoint (rendered as text)."""
    key: str
    value: str
    type: str


@dataclass(frozen=True)
class Description:
    """A checkpoint's tensor table (in file order) and metadata."""
    source: SourceInfo
    tensors: List[TensorInfo] = field(default_factory=list)
    metadata: List[MetaEntry] = field(default_factory=list)

    def tensor(self, name: str) -> TensorInfo:
        """The tensor called `name` (KeyError when there is none)."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class WeightStatus:
    """A weight the daemon holds in shared memory."""
    handle: int
    label: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    refs: int            #: references held, by all clients together
    clients: int         #: distinct clients holding it
    generation: int
    digest: Optional[bytes]
    source: str
    adopted: bool        #: re-adopted after a daemon restart rather than read again


@dataclass(frozen=True)
class JobStatus:
    """A materialization in flight."""
    key: Optional[bytes]
    label: str
    nbytes: int
    done: int
    elapsed_ms: int = 0  #: since it was made: done / elapsed_ms is its rate


@dataclass(frozen=True)
class Status:
    """The daemon's counters, sources, weights and jobs."""
    instance: str
    server_version: str
    uptime_ms: int
    bytes_resident: int
    budget_bytes: int
    weights: int
    clients: int
    bytes_read: int
    materializations: int
    materializations_failed: int
    materializations_in_flight: int
    evictions: int
    readoptions: int
    bytes_materialized: int
    materialize_ns: int
    references: int
    sources: List[SourceInfo]
    weight_list: List[WeightStatus]
    jobs: List[JobStatus]
    #: weights no connected client references that the daemon keeps because processes map
    #: them (engines from before a restart that have not reconnected), and their bytes
    locked_weights: int = 0
    locked_bytes: int = 0
    #: whether every preload = yes checkpoint is resident and every required = yes one
    #: admitted (None from a daemon that does not say), and why not
    ready: Optional[bool] = None
    not_ready: str = ""
    #: remote admissions that failed, and failed ones tried again by themselves
    admissions_failed: int = 0
    admission_retries: int = 0


@dataclass(frozen=True)
class ClientInfo:
    """A connection to the daemon and what it holds (Client.clients())."""
    id: int
    uid: int
    gid: int
    pid: int             #: 0 when the daemon cannot see it (another PID namespace)
    name: str            #: as given when it connected
    bytes: int           #: bytes of the distinct weights it holds
    weights: int         #: references it holds
    segments: int        #: segments those lie in
    pending: int         #: its requests for weights in flight
    connected_ms: int    #: how long ago it connected
    admin: bool          #: connected through the admin socket


@dataclass(frozen=True)
class Event:
    """A subscribed checkpoint changed: its files changed and the daemon reloaded it
    (``what == "generation"``, with the new `generation`), or it was removed. Or weightd went
    away (a restart) and the client connected again by itself (``what == "reconnected"``,
    `reconnected` true, `generation` the number of held weights it re-attached): nothing the
    process maps changed, and the weights it holds are its own again."""
    checkpoint: str
    generation: int
    what: str            #: "generation", "removed" or "reconnected"

    @property
    def reconnected(self) -> bool:
        """The client connected again after weightd went away (see above)."""
        return self.what == "reconnected"


@dataclass(frozen=True)
class Events:
    """What Client.poll_events() collected, oldest first, and how many were lost to the
    library's queue bound (1024) since the last poll."""
    events: List[Event]
    dropped: int


@dataclass(frozen=True)
class ReloadReport:
    """What Client.reload() did, one sentence each: `changes` it applied (a key's new value, a
    checkpoint's new generation, one added or removed) and `warnings` about what it could not
    apply (a key that takes effect only when weightd restarts, a checkpoint whose changed files
    were refused while its last good generation is still served)."""
    changes: List[str]
    warnings: List[str]


def _description(d: Dict[str, Any]) -> Description:
    return Description(SourceInfo(**d["source"]), [TensorInfo(**t) for t in d["tensors"]],
                       [MetaEntry(**m) for m in d["metadata"]])


def _status(d: Dict[str, Any]) -> Status:
    d = dict(d)
    d["sources"] = [SourceInfo(**s) for s in d["sources"]]
    d["weight_list"] = [WeightStatus(**w) for w in d["weight_list"]]
    d["jobs"] = [JobStatus(**j) for j in d["jobs"]]
    return Status(**d)
