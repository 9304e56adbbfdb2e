// SPDX-License-Identifier: Apache-2.0
//! Weights this process holds, and requests for them in flight.
use std::cell::Cell;
use std::fmt;

use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::ffi::{InflightHandle, OnceSlot, WeightHandle};
use crate::info::WeightInfo;

/// A weight this process holds: read-only bytes in shared memory, one physical copy however
/// many processes hold it. `Send + Sync`; [`share`](Weight::share) gets another reference to the
/// same memory from the daemon (no read, no copy). Dropping it releases the reference and, with
/// the last weight of its segment, the mapping.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::{Client, Dtype, Selection};
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// let w = client.materialize("m", "wte", Some(&Selection::range(0, 1, 2)))?.finish()?;
/// assert_eq!((w.dtype(), w.shape()), (Dtype::F32, &[1u64, 8][..]));
/// let row: &[f32] = w.as_slice()?;              // checked: dtype, size, alignment
/// assert_eq!(row, &[8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]);
/// assert!(w.as_slice::<u16>().is_err());        // an F32 weight is not 16-bit
/// let again = w.share()?;                       // the same memory, counted by the daemon
/// assert_eq!(again.as_bytes().as_ptr(), w.as_bytes().as_ptr());
/// std::thread::spawn(move || assert_eq!(again.as_slice::<f32>().unwrap()[0], 8.0)).join().unwrap();
/// # Ok(()) }
/// ```
pub struct Weight {
    h: WeightHandle,
}

impl Weight {
    pub(crate) fn from_handle(h: WeightHandle) -> Weight {
        Weight { h }
    }

    pub fn info(&self) -> &WeightInfo {
        self.h.info()
    }
    pub fn dtype(&self) -> Dtype {
        self.h.info().dtype
    }
    pub fn shape(&self) -> &[u64] {
        &self.h.info().shape
    }
    pub fn nbytes(&self) -> u64 {
        self.h.info().nbytes
    }

    /// The weight's bytes, valid as long as the weight.
    pub fn as_bytes(&self) -> &[u8] {
        self.h.bytes()
    }

    /// The bytes as elements of `T`: checked that `T` fits the dtype (`f32` for F32, `u16` for
    /// the bits of BF16 and F16, `u8` for FP8, ...), that the size is whole elements and the
    /// memory aligned for `T`.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        crate::ffi::typed_view(self.as_bytes(), self.dtype())
    }

    pub fn as_f32(&self) -> Result<&[f32]> {
        self.as_slice()
    }
    /// The raw bits of a BF16 weight.
    pub fn as_bf16_bits(&self) -> Result<&[u16]> {
        self.require(Dtype::BF16)?;
        self.as_slice()
    }
    /// The raw bits of an F16 weight.
    pub fn as_f16_bits(&self) -> Result<&[u16]> {
        self.require(Dtype::F16)?;
        self.as_slice()
    }

    fn require(&self, d: Dtype) -> Result<()> {
        if self.dtype() == d {
            Ok(())
        } else {
            Err(Error::local(
                crate::ErrorCode::DtypeMismatch,
                format!("the weight is {}, not {}", self.dtype(), d),
            ))
        }
    }

    /// Another reference to the same weight from the daemon: a new `Weight` in the same segment
    /// at the same offset (one round trip; nothing read, nothing copied). Each is released on
    /// its own, in any order.
    pub fn share(&self) -> Result<Weight> {
        Ok(Weight { h: self.h.share()? })
    }

    /// Another holder of this weight's reference, made locally without asking the daemon (it
    /// counts the weight once; works after the connection is lost).
    pub fn dup(&self) -> Result<Weight> {
        Ok(Weight { h: self.h.dup()? })
    }
}

impl fmt::Debug for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.info();
        f.debug_struct("Weight")
            .field("name", &i.name)
            .field("dtype", &i.dtype)
            .field("shape", &i.shape)
            .field("segment", &i.segment)
            .field("offset", &i.offset)
            .finish()
    }
}

/// A request in flight: the daemon reads and fills the weight (or shares one it has) while
/// the caller goes on. [`weight`](Materialization::weight) borrows the weight once it has
/// arrived, without waiting; [`finish`](Materialization::finish) waits and yields it; dropping
/// the request abandons it (a weight that comes later is released).
///
/// `Send` but not `Sync`: one thread at a time uses a request, as libweightd requires; hand it
/// to another thread whole.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::{Client, Dtype, Recipe};
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// let m = client.materialize_recipe(&Recipe::source("m", "norm").cast(Dtype::BF16))?;
/// let abandoned = client.materialize("m", "wte", None)?;
/// drop(abandoned);                                // no reply is waited for
/// while m.weight()?.is_none() {                   // look without waiting
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// assert_eq!(m.weight()?.unwrap().dtype(), Dtype::BF16);  // borrowed while in flight
/// let w = m.finish()?;                            // the same weight, now owned
/// assert_eq!(w.as_bf16_bits()?.len(), 16);
/// # Ok(()) }
/// ```
pub struct Materialization {
    inflight: Cell<Option<InflightHandle>>,
    arrived: OnceSlot<Weight>,
    failed: Cell<Option<Error>>,
}

impl Materialization {
    pub(crate) fn new(h: InflightHandle) -> Materialization {
        Materialization { inflight: Cell::new(Some(h)), arrived: OnceSlot::new(), failed: Cell::new(None) }
    }

    /// The weight, borrowed, if it has arrived (`None` while the daemon still works); the
    /// request's error if it failed. Never waits.
    pub fn weight(&self) -> Result<Option<&Weight>> {
        if let Some(w) = self.arrived.get() {
            return Ok(Some(w));
        }
        if let Some(e) = self.failed.take() {
            self.failed.set(Some(e.clone()));
            return Err(e);
        }
        let mut f = match self.inflight.take() {
            Some(f) => f,
            None => return Err(Error::local(crate::ErrorCode::Internal, "the request is gone")),
        };
        match f.arrived() {
            Ok(false) => {
                self.inflight.set(Some(f));
                Ok(None)
            }
            Err(e) => {
                self.inflight.set(Some(f));
                Err(e)
            }
            // It is here: take it now (finish does not wait for a reply that has arrived).
            Ok(true) => match f.finish() {
                Ok(h) => Ok(Some(self.arrived.set(Weight::from_handle(h)))),
                Err(e) => {
                    self.failed.set(Some(e.clone()));
                    Err(e)
                }
            },
        }
    }

    /// Waits for the weight and yields it.
    pub fn finish(self) -> Result<Weight> {
        let Materialization { inflight, arrived, failed } = self;
        if let Some(w) = arrived.into_inner() {
            return Ok(w);
        }
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        match inflight.into_inner() {
            Some(f) => Ok(Weight::from_handle(f.finish()?)),
            None => Err(Error::local(crate::ErrorCode::Internal, "the request is gone")),
        }
    }
}

impl fmt::Debug for Materialization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Materialization").field("arrived", &self.arrived.get().is_some()).finish()
    }
}
