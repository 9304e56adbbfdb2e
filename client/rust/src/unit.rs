// SPDX-License-Identifier: Apache-2.0
//! Units: parameter slots bound all-or-nothing. The typestate is the contract: a `Unit` is
//! declared and submitted, `validate` does every fallible step and yields a `ValidatedUnit`,
//! whose `bind` cannot fail and yields the `BoundUnit` the slots' weights are borrowed from.
use std::fmt;

use crate::dtype::{Dtype, Element};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::UnitHandle;
use crate::info::{Output, WeightInfo};
use crate::recipe::Recipe;
use crate::selection::Selection;
use crate::weight::Weight;

/// A set of parameter slots bound atomically: a layer, a model, one rank's shards. Each slot has
/// a name, the dtype and shape the engine expects, and a source tensor, a recipe, or another
/// slot it aliases (two names, one weight). `Send`, not `Sync`: one thread at a time.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::{Client, Dtype, Recipe, Selection};
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// let mut unit = client.unit()?;
/// unit.slot("embed", Some(Dtype::F32), &[16, 8])?;
/// unit.set_tensor("embed", "m", "wte", None)?;
/// unit.slot("lm_head", Some(Dtype::F32), &[16, 8])?;
/// unit.set_alias("lm_head", "embed")?;                   // tied weights: one copy
/// unit.slot("q", Some(Dtype::F16), &[4, 16])?;            // rank 1 of 2, cast
/// unit.set_recipe("q", &Recipe::source_part("m", "q", Selection::shard(0, 1, 2)).cast(Dtype::F16))?;
/// unit.submit()?;                                         // one request; returns at once
/// let bound = unit.validate()?.bind();                    // bind cannot fail
/// assert_eq!(bound.weight("embed").unwrap().as_slice::<f32>()?[9], 9.0);
/// assert_eq!(bound.weight("lm_head").unwrap().as_bytes().as_ptr(),
///            bound.weight("embed").unwrap().as_bytes().as_ptr());
/// assert_eq!(bound.weight("q").unwrap().as_f16_bits()?.len(), 64);
/// # Ok(()) }
/// ```
pub struct Unit {
    h: UnitHandle,
}

impl Unit {
    pub(crate) fn from_handle(h: UnitHandle) -> Unit {
        Unit { h }
    }

    /// Declares a slot: `dtype` and `shape` are what the engine expects (checked by the daemon
    /// before it makes anything, and again on what arrives); `dtype` None accepts anything (the
    /// shape is then ignored). Returns the slot's index.
    pub fn slot(&mut self, name: &str, dtype: Option<Dtype>, shape: &[u64]) -> Result<usize> {
        self.h.slot(name, dtype, shape)
    }

    /// Fills `slot` from a source tensor (`sel` None: whole).
    pub fn set_tensor(
        &mut self,
        slot: &str,
        checkpoint: &str,
        tensor: &str,
        sel: Option<&Selection>,
    ) -> Result<()> {
        self.h.set_tensor(slot, (checkpoint, tensor), sel)
    }

    /// Fills `slot` from a recipe.
    pub fn set_recipe(&mut self, slot: &str, recipe: &Recipe) -> Result<()> {
        let r = recipe.to_handle()?;
        self.h.set_recipe(slot, &r)
    }

    /// Makes `slot` an alias of `target`: it gets the target's weight.
    pub fn set_alias(&mut self, slot: &str, target: &str) -> Result<()> {
        self.h.set_alias(slot, target)
    }

    /// The daemon's inference for every slot (dtype, shape, bytes, identity) from metadata
    /// alone: nothing read, made or held. One output per slot, found by name.
    pub fn preflight(&mut self) -> Result<Vec<Output>> {
        self.h.preflight()
    }

    /// Sends the whole unit as one request and returns at once.
    pub fn submit(&mut self) -> Result<()> {
        self.h.submit()
    }

    /// Whether the reply to the submitted unit has arrived (so validate will not wait).
    pub fn poll(&mut self) -> Result<bool> {
        self.h.poll()
    }

    /// Waits for the reply: then the unit holds a weight for every slot, or (on error) none.
    pub fn finish(&mut self) -> Result<()> {
        self.h.finish()
    }

    /// A slot's weight after a successful finish.
    pub fn weight_info(&self, slot: &str) -> Option<WeightInfo> {
        self.h.weight_info(slot)
    }

    /// Checkpoint bytes the daemon read to answer the last finished submit (0: all shared).
    pub fn bytes_read(&self) -> u64 {
        self.h.bytes_read()
    }

    pub fn slot_names(&self) -> Vec<String> {
        self.h.slot_names()
    }

    /// Whether validate pre-faults the unit's pages (off by default): with `true`, once every
    /// slot is mapped, validate enters each weight's pages into this process's page tables, so
    /// the page faults of a first read are paid there, before the engine serves, and reading
    /// the unit afterwards takes none. Advisory: a populate the kernel refuses leaves validate
    /// successful and the pages fault in on first read as usual.
    pub fn set_populate(&mut self, on: bool) -> Result<()> {
        self.h.set_populate(on)
    }

    /// Every fallible step of binding (waiting for the reply first): each slot's dtype, shape
    /// and size checked against its declaration, each segment checked and mapped. On failure
    /// nothing is held or mapped and the unit comes back as it was before submit (its slots and
    /// sources kept) inside the error: fix what it names and submit again.
    pub fn validate(mut self) -> std::result::Result<ValidatedUnit, ValidateError> {
        match self.h.validate() {
            Ok(()) => Ok(ValidatedUnit { h: self.h }),
            Err(error) => Err(ValidateError { error, unit: self }),
        }
    }
}

impl fmt::Debug for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unit").field("slots", &self.slot_names()).finish()
    }
}

/// A failed validate: the error, and the unit back as it was before submit. Converts into
/// [`Error`] with `?`.
#[derive(Debug)]
pub struct ValidateError {
    pub error: Error,
    pub unit: Unit,
}

impl ValidateError {
    pub fn into_unit(self) -> Unit {
        self.unit
    }
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ValidateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<ValidateError> for Error {
    fn from(v: ValidateError) -> Error {
        v.error
    }
}

/// A unit whose every slot passed validation and is mapped; nothing is published yet. `bind`
/// publishes and cannot fail, so an engine validates all its units before it binds any.
pub struct ValidatedUnit {
    h: UnitHandle,
}

impl ValidatedUnit {
    /// Publishes the unit. Infallible: everything that could fail happened in validate.
    pub fn bind(mut self) -> BoundUnit {
        self.h.bind();
        BoundUnit { h: self.h }
    }

    /// Checkpoint bytes the daemon read for this unit (0: everything was shared).
    pub fn bytes_read(&self) -> u64 {
        self.h.bytes_read()
    }
}

impl fmt::Debug for ValidatedUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatedUnit").field("slots", &self.h.slot_names()).finish()
    }
}

/// A bound unit: every slot's weight is borrowed from it, as read-only memory (the slices may
/// be read from any thread). Dropping it unmaps and releases everything.
pub struct BoundUnit {
    h: UnitHandle,
}

impl BoundUnit {
    /// A slot's weight (an alias gives its target's), or None for an unknown slot.
    pub fn weight(&self, slot: &str) -> Option<SlotWeight<'_>> {
        let info = self.h.weight_info(slot)?;
        let bytes = self.h.data(slot)?;
        Some(SlotWeight { unit: self, slot: slot.to_string(), info, bytes })
    }

    pub fn slot_names(&self) -> Vec<String> {
        self.h.slot_names()
    }

    /// Checkpoint bytes the daemon read for this unit (0: everything was shared).
    pub fn bytes_read(&self) -> u64 {
        self.h.bytes_read()
    }
}

impl fmt::Debug for BoundUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundUnit").field("slots", &self.h.slot_names()).finish()
    }
}

/// One slot's weight, borrowed from its bound unit.
pub struct SlotWeight<'u> {
    unit: &'u BoundUnit,
    slot: String,
    info: WeightInfo,
    bytes: &'u [u8],
}

impl<'u> SlotWeight<'u> {
    pub fn slot(&self) -> &str {
        &self.slot
    }
    pub fn info(&self) -> &WeightInfo {
        &self.info
    }
    pub fn dtype(&self) -> Dtype {
        self.info.dtype
    }
    pub fn shape(&self) -> &[u64] {
        &self.info.shape
    }
    /// The bytes, valid as long as the unit is bound.
    pub fn as_bytes(&self) -> &'u [u8] {
        self.bytes
    }
    /// The bytes as `T` (see [`Weight::as_slice`]).
    pub fn as_slice<T: Element>(&self) -> Result<&'u [T]> {
        crate::ffi::typed_view(self.bytes, self.info.dtype)
    }
    pub fn as_f32(&self) -> Result<&'u [f32]> {
        self.as_slice()
    }
    pub fn as_bf16_bits(&self) -> Result<&'u [u16]> {
        self.require(Dtype::BF16)?;
        self.as_slice()
    }
    pub fn as_f16_bits(&self) -> Result<&'u [u16]> {
        self.require(Dtype::F16)?;
        self.as_slice()
    }
    fn require(&self, d: Dtype) -> Result<()> {
        if self.info.dtype == d {
            Ok(())
        } else {
            Err(Error::local(
                ErrorCode::DtypeMismatch,
                format!("slot {:?} is {}, not {}", self.slot, self.info.dtype, d),
            ))
        }
    }
    /// A reference of its own to this weight, from the daemon, that outlives the unit.
    pub fn share(&self) -> Result<Weight> {
        Ok(Weight::from_handle(self.unit.h.share(&self.slot)?))
    }
}

impl fmt::Debug for SlotWeight<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotWeight").field("slot", &self.slot).field("info", &self.info).finish()
    }
}
