// SPDX-License-Identifier: Apache-2.0
//! Safe Rust over libweightd: bind model weights that the weightd daemon serves from shared
//! memory, one physical copy however many processes use them.
//!
//! - [`Client`]: the connection (`list`, `describe`, `status`).
//! - [`Selection`] and [`Recipe`]: values describing what to read (a shard, a range, a cast,
//!   a concatenation, ...); [`Recipe::preflight`] has the daemon check shape and dtype first.
//! - [`Materialization`]: a request in flight ([`Client::materialize`],
//!   [`Client::materialize_recipe`]); `weight()` borrows, `finish()` consumes, drop abandons.
//! - [`Weight`]: a held weight; `Send + Sync`, `share()`, `as_bytes()`, checked typed views,
//!   released on drop.
//! - [`Unit`]: slots bound all-or-nothing: `submit`, `validate` (every fallible step) and
//!   `bind` (cannot fail), after which each slot's weight is borrowed from the [`BoundUnit`].
//! - [`Error`]: weightd's code, slot and message; `Send + Sync + 'static`.
//!
//! libweightd's thread rules are in the types: a `Client` and a `Weight` may be used from any
//! number of threads at once; a `Unit` or a `Materialization` by one thread at a time (`Send`,
//! not `Sync`); the connection closes only after everything made through it is gone. So
//! sharing a unit or an in-flight request between threads does not compile:
//!
//! ```compile_fail
//! fn share<T: Sync>(_: &T) {}
//! fn f(unit: weightd::Unit) { share(&unit) }
//! ```
//!
//! ```compile_fail
//! fn share<T: Sync>(_: &T) {}
//! fn f(m: weightd::Materialization) { share(&m) }
//! ```
//!
//! ```compile_fail
//! fn share<T: Sync>(_: &T) {}
//! fn f(b: weightd::BoundUnit) { share(&b) }
//! ```
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let daemon = weightd::testing::Daemon::with_sample()?;
//! use weightd::{Client, Dtype, Recipe, Selection};
//!
//! let client = Client::connect(Some(daemon.socket()), "my-engine")?;
//! let mut unit = client.unit()?;
//! unit.slot("q", Some(Dtype::F16), &[4, 16])?;
//! unit.set_recipe("q", &Recipe::source_part("m", "q", Selection::shard(0, 0, 2)).cast(Dtype::F16))?;
//! unit.submit()?;
//! let bound = unit.validate()?.bind();
//! let q: &[u16] = bound.weight("q").unwrap().as_f16_bits()?;
//! assert_eq!(q.len(), 64);
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

mod client;
mod dtype;
mod error;
mod ffi;
mod info;
mod recipe;
mod selection;
mod unit;
mod weight;

#[doc(hidden)]
pub mod testing;

pub use client::{library_version, Client};
pub use dtype::{Dtype, Element};
pub use error::{Error, ErrorCode, Result};
pub use info::{
    Description, Event, MetaEntry, Output, SegmentStatus, ServerInfo, SourceInfo, Status, TensorInfo,
    WeightInfo, WeightStatus,
};
pub use recipe::Recipe;
pub use selection::Selection;
pub use unit::{BoundUnit, SlotWeight, Unit, ValidateError, ValidatedUnit};
pub use weight::{Materialization, Weight};

#[cfg(test)]
mod thread_rules {
    //! The thread rules of client.h, checked at compile time.
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn types_carry_the_c_thread_rules() {
        send_sync::<Client>();
        send_sync::<Weight>();
        send_sync::<Error>();
        send_sync::<Recipe>();
        send::<Unit>();
        send::<ValidatedUnit>();
        send::<BoundUnit>();
        send::<Materialization>();
        // Unit, BoundUnit and Materialization are not Sync: the compile_fail examples of the
        // crate's documentation show that sharing one between threads does not compile.
    }
}
