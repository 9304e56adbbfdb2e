// SPDX-License-Identifier: Apache-2.0
//! The connection to weightd, and what it tells about its checkpoints and itself.
use std::path::Path;
use std::sync::Arc;

use crate::dtype::Dtype;
use crate::error::Result;
use crate::ffi::{ClientHandle, UnitHandle};
use crate::recipe::{Recipe, Selection};
use crate::unit::Unit;
use crate::weight::Materialization;

/// A connection to weightd. `Send + Sync` and cheap to clone: every thread may use it at once
/// (libweightd pipelines their requests on one socket). The connection closes when the last
/// clone, and the last unit, request and weight made through it, are gone.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::Client;
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// let sources = client.list()?;
/// assert_eq!(sources[0].name, "m");
/// let table = client.describe("m")?;
/// let wte = table.tensors.iter().find(|t| t.name == "wte").unwrap();
/// assert_eq!((wte.dtype, &wte.shape[..]), (weightd::Dtype::F32, &[16u64, 8][..]));
/// let status = client.status()?;
/// assert_eq!(status.instance, client.server().instance);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) handle: Arc<ClientHandle>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("instance", &self.server().instance).finish()
    }
}

impl Client {
    /// Connects and says hello. `socket` None means `$WEIGHTD_SOCKET`, else the system socket
    /// (`/run/weightd/weightd.sock`); `name` shows in the daemon's logs and status.
    pub fn connect(socket: Option<&Path>, name: &str) -> Result<Client> {
        Ok(Client { handle: ClientHandle::connect(socket, name)? })
    }

    /// What the daemon said in its hello.
    pub fn server(&self) -> ServerInfo {
        self.handle.server()
    }

    /// Every checkpoint this client may see.
    pub fn list(&self) -> Result<Vec<SourceInfo>> {
        self.handle.list()
    }

    /// A checkpoint's tensor table and metadata.
    pub fn describe(&self, checkpoint: &str) -> Result<Description> {
        self.handle.describe(checkpoint)
    }

    /// The daemon's counters, sources, cached weights and segments.
    pub fn status(&self) -> Result<Status> {
        self.handle.status(true)
    }

    /// `status` without the list of weights: what monitoring needs, cheap on a large cache.
    pub fn status_summary(&self) -> Result<Status> {
        self.handle.status(false)
    }

    /// Asks for one source tensor (`sel` None: whole) and returns at once; see
    /// [`Materialization`].
    pub fn materialize(
        &self,
        checkpoint: &str,
        tensor: &str,
        sel: Option<&Selection>,
    ) -> Result<Materialization> {
        Ok(Materialization::new(self.handle.materialize(checkpoint, tensor, sel)?))
    }

    /// Asks for a recipe's output and returns at once; see [`Materialization`].
    pub fn materialize_recipe(&self, recipe: &Recipe) -> Result<Materialization> {
        let r = recipe.to_handle()?;
        Ok(Materialization::new(self.handle.materialize_recipe(&r)?))
    }

    /// A new, empty unit; see [`Unit`].
    pub fn unit(&self) -> Result<Unit> {
        Ok(Unit::from_handle(UnitHandle::new(&self.handle)?))
    }
}

/// The daemon's hello.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    pub protocol_version: u32,
    pub server_version: String,
    /// The daemon's instance (its shared-memory prefix).
    pub instance: String,
    pub max_frame_bytes: u32,
    pub max_pending_requests: u32,
    pub max_unit_entries: u32,
    pub max_recipe_nodes: u32,
    pub max_client_bytes: u64,
    pub max_client_weights: u32,
    pub min_protocol_version: u32,
    pub max_protocol_version: u32,
    pub segment_max_bytes: u64,
    pub max_client_segments: u32,
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
    pub bytes_resident: u64,
    pub budget_bytes: u64,
    pub weights: u64,
    pub clients: u64,
    /// Checkpoint bytes read since the daemon started.
    pub bytes_read: u64,
    pub materializations: u64,
    pub materializations_failed: u64,
    pub references: u64,
    pub segments: u64,
    pub sources: Vec<SourceInfo>,
    /// Empty from `status_summary`.
    pub weight_list: Vec<WeightStatus>,
    pub segment_list: Vec<SegmentStatus>,
}

/// The version of the linked libweightd.
pub fn library_version() -> String {
    crate::ffi::version()
}
