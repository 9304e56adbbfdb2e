// SPDX-License-Identifier: Apache-2.0
//! The connection to weightd, and what it tells about its checkpoints and itself.
use std::path::Path;
use std::sync::Arc;

use crate::dtype::Dtype;
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::{ClientHandle, UnitHandle};
use crate::info::{Description, Event, Output, ServerInfo, SourceInfo, Status};
use crate::recipe::Recipe;
use crate::selection::Selection;
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

    /// Events queued since the last call, waiting up to `timeout_ms` (0: not at all; -1: until
    /// one comes) when none is. See [`Event`]; generation events need a subscription, a
    /// reconnection event does not.
    pub fn poll_events(&self, timeout_ms: i32) -> Result<Vec<Event>> {
        self.handle.poll_events(timeout_ms)
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

// A recipe's preflight is a one-slot unit's: it lives beside the client, which makes units, so
// that recipe.rs stays below client.rs and unit.rs.
impl Recipe {
    /// Has the daemon check the recipe and infer its output from metadata alone: nothing is
    /// read, made or held.
    pub fn preflight(&self, client: &Client) -> Result<Output> {
        self.preflight_slot(client, None)
    }

    /// As `preflight`, and the output must be `dtype` and `shape` (`SlotMismatch` otherwise,
    /// from the daemon, naming both).
    pub fn preflight_as(&self, client: &Client, dtype: Dtype, shape: &[u64]) -> Result<Output> {
        self.preflight_slot(client, Some((dtype, shape)))
    }

    fn preflight_slot(&self, client: &Client, expect: Option<(Dtype, &[u64])>) -> Result<Output> {
        let mut u = client.unit()?;
        match expect {
            Some((d, s)) => u.slot("output", Some(d), s)?,
            None => u.slot("output", None, &[])?,
        };
        u.set_recipe("output", self)?;
        let mut outs = u.preflight()?;
        outs.pop().ok_or_else(|| Error::local(ErrorCode::Protocol, "the daemon's preflight listed no output"))
    }
}

/// The version of the linked libweightd.
pub fn library_version() -> String {
    crate::ffi::version()
}
