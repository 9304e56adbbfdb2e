// SPDX-License-Identifier: Apache-2.0
//! What the daemon and libweightd report, as plain owned values: the hello, checkpoints and
//! their tensors, the daemon's status, preflight outputs, a weight's description.
use crate::dtype::Dtype;

/// The daemon's hello.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The daemon's version, and its instance (its shared-memory prefix).
    pub server_version: String,
    pub instance: String,
    /// The protocol spoken on this connection, and the range the daemon speaks.
    pub protocol_version: u32,
    pub min_protocol_version: u32,
    pub max_protocol_version: u32,
    /// What one request may hold.
    pub max_frame_bytes: u32,
    pub max_unit_entries: u32,
    pub max_recipe_nodes: u32,
    /// What one connection may have in flight and hold.
    pub max_pending_requests: u32,
    pub max_client_bytes: u64,
    pub max_client_weights: u32,
    pub max_client_segments: u32,
    /// The largest segment the daemon makes.
    pub segment_max_bytes: u64,
}

/// A checkpoint the daemon serves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceInfo {
    pub name: String,
    /// "safetensors", "safetensors-sharded" or "gguf".
    pub kind: String,
    pub path: String,
    pub tensors: u64,
    pub bytes: u64,
    pub generation: u64,
    /// "ready", "failed" or "removed".
    pub state: String,
    pub error: String,
    pub files: u32,
}

/// One tensor of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    pub offset: u64,
    pub file: String,
    pub block_elems: u32,
    pub block_bytes: u32,
}

/// One metadata entry of a checkpoint (rendered as text).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetaEntry {
    pub key: String,
    pub value: String,
    /// "string", "u32", "array[string]", ...
    pub kind: String,
}

/// A checkpoint's tensor table (in file order) and metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Description {
    pub source: SourceInfo,
    pub tensors: Vec<TensorInfo>,
    pub metadata: Vec<MetaEntry>,
}

/// A weight in the daemon's cache.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WeightStatus {
    pub handle: u64,
    pub label: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    /// References held, by all clients together.
    pub refs: u32,
    pub clients: u32,
    pub source: String,
    pub segment: u64,
    pub offset: u64,
}

/// A shared-memory segment of the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentStatus {
    pub id: u64,
    pub name: String,
    pub size: u64,
    pub weights: u32,
    pub held: u32,
    pub source: String,
}

/// The daemon's status (a subset of `weightd_status`: the counters an engine or a test reads).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    pub instance: String,
    pub server_version: String,
    pub uptime_ms: u64,
    /// Connected clients.
    pub clients: u64,
    /// The budget, and the bytes of weights resident within it.
    pub budget_bytes: u64,
    pub bytes_resident: u64,
    /// Weights cached, references clients hold to them, and the segments holding them.
    pub weights: u64,
    pub references: u64,
    pub segments: u64,
    /// Checkpoint bytes read since the daemon started, and the weights made from them.
    pub bytes_read: u64,
    pub materializations: u64,
    pub materializations_failed: u64,
    /// Weights no connected client references that the daemon keeps because processes map
    /// them (engines from before a restart that have not reconnected, say), and their bytes.
    pub locked_weights: u64,
    pub locked_bytes: u64,
    pub sources: Vec<SourceInfo>,
    /// Empty from `status_summary`.
    pub weight_list: Vec<WeightStatus>,
    pub segment_list: Vec<SegmentStatus>,
}

/// What `Client::poll_events` collects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A subscribed checkpoint's files changed and the daemon reloaded it.
    Generation { checkpoint: String, generation: u64 },
    /// A subscribed checkpoint was removed from the configuration.
    Removed { checkpoint: String },
    /// weightd went away (a restart, a crash) and the client connected again by itself, on the
    /// first call after weightd was back. Nothing this process maps changed (each weight it
    /// holds is locked in the kernel, and no weightd changes a locked weight); `reattached` of
    /// the weights it holds count as its own again. Requests in flight when weightd went away
    /// failed with `ErrorCode::Disconnected`.
    Reconnected { reattached: u64 },
    /// An event this crate does not know yet.
    Other { checkpoint: String, what: String, generation: u64 },
}

/// What a slot would hold, inferred by preflight.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Output {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    /// The slot this one is an alias of.
    pub alias_of: Option<String>,
    /// The identity the weight would have (equal keys: equal bytes, one copy).
    pub key: Option<Vec<u8>>,
}

/// What a weight is: where it lies, its dtype and shape, its identity and content digest.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WeightInfo {
    /// The entry name (the tensor's, or the recipe's label).
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    /// The daemon's id of the shared-memory segment (equal ids: the same memory).
    pub segment: u64,
    /// Where the weight starts in its segment.
    pub offset: u64,
    /// The daemon's name for the weight.
    pub handle: u64,
    /// The generation of the checkpoint it was made from.
    pub generation: u64,
    /// Identity: SHA-256 of the canonical recipe and its sources' identities.
    pub key: [u8; 32],
    /// The content digest computed while filling (16 bytes for XXH3-128, 32 for SHA-256).
    pub digest: Vec<u8>,
    /// "xxh3-128", "sha256" or "unknown".
    pub digest_algorithm: String,
}
