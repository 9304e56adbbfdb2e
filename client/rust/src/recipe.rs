// SPDX-License-Identifier: Apache-2.0
//! Selections and recipes as plain values: built with the functions below, compared, cloned,
//! sent between threads; lowered to libweightd's node-by-node form only when a request is made.
use std::os::raw::c_int;

use crate::dtype::Dtype;
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::RecipeHandle;
use crate::selection::Selection;

/// A derived weight: a small tree of operations over source tensors. The daemon computes it
/// once and shares the result with every process that asks for the same recipe. A recipe is a
/// value; [`Recipe::preflight`] has the daemon infer (and check) its dtype and shape from
/// metadata alone, before any payload is read.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::{Client, Dtype, Recipe, Selection};
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// // rank 0 of 2 of the rows of an F32 [16, 8] tensor, as F16
/// let r = Recipe::source_part("m", "wte", Selection::shard(0, 0, 2)).cast(Dtype::F16);
/// let out = r.preflight(&client)?;
/// assert_eq!((out.dtype, &out.shape[..], out.nbytes), (Dtype::F16, &[8u64, 8][..], 128));
/// // a declared expectation the recipe does not meet is refused, naming the rule
/// let err = r.preflight_as(&client, Dtype::BF16, &[8, 8]).unwrap_err();
/// assert_eq!(err.code(), weightd::ErrorCode::SlotMismatch);
/// // joins, reshapes and views are values too
/// let both = Recipe::concat(0, vec![Recipe::source("m", "wte"), Recipe::source("m", "wte")]);
/// assert_eq!(both.transpose(vec![1, 0]).preflight(&client)?.shape, vec![8, 32]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Recipe {
    op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Op {
    Source { checkpoint: String, tensor: String, sel: Option<Selection> },
    Select { input: Box<Recipe>, sel: Selection },
    Concat { axis: u32, inputs: Vec<Recipe>, stack: bool },
    Reshape { input: Box<Recipe>, shape: Vec<u64> },
    Transpose { input: Box<Recipe>, perm: Vec<u32> },
    Cast { input: Box<Recipe>, dtype: Dtype },
    View { input: Box<Recipe>, dtype: Dtype, shape: Vec<u64> },
    DequantBlock { input: Box<Recipe>, scale: Box<Recipe>, block: Vec<u64>, dtype: Dtype },
}

impl Recipe {
    /// A whole source tensor.
    pub fn source(checkpoint: &str, tensor: &str) -> Recipe {
        Recipe { op: Op::Source { checkpoint: checkpoint.into(), tensor: tensor.into(), sel: None } }
    }

    /// Part of a source tensor (only the selected bytes are read).
    pub fn source_part(checkpoint: &str, tensor: &str, sel: Selection) -> Recipe {
        Recipe { op: Op::Source { checkpoint: checkpoint.into(), tensor: tensor.into(), sel: Some(sel) } }
    }

    /// A selection of this intermediate result.
    pub fn select(self, sel: Selection) -> Recipe {
        Recipe { op: Op::Select { input: Box::new(self), sel } }
    }

    /// Joins `inputs` along an existing axis.
    pub fn concat(axis: u32, inputs: Vec<Recipe>) -> Recipe {
        Recipe { op: Op::Concat { axis, inputs, stack: false } }
    }

    /// Joins `inputs` along a new axis inserted at `axis`.
    pub fn stack(axis: u32, inputs: Vec<Recipe>) -> Recipe {
        Recipe { op: Op::Concat { axis, inputs, stack: true } }
    }

    /// The same elements in a new shape.
    pub fn reshape(self, shape: Vec<u64>) -> Recipe {
        Recipe { op: Op::Reshape { input: Box::new(self), shape } }
    }

    /// Axes permuted: output axis i is input axis `perm[i]`.
    pub fn transpose(self, perm: Vec<u32>) -> Recipe {
        Recipe { op: Op::Transpose { input: Box::new(self), perm } }
    }

    /// Values converted to `dtype` (round to nearest even).
    pub fn cast(self, dtype: Dtype) -> Recipe {
        Recipe { op: Op::Cast { input: Box::new(self), dtype } }
    }

    /// The same bytes reinterpreted as `dtype` and `shape` (byte counts must agree).
    pub fn view(self, dtype: Dtype, shape: Vec<u64>) -> Recipe {
        Recipe { op: Op::View { input: Box::new(self), dtype, shape } }
    }

    /// Block-scale dequantization: this input times `scale` (F32, one value per block of shape
    /// `block`), computed in F32 and rounded once to `dtype`.
    pub fn dequant_block(self, scale: Recipe, block: Vec<u64>, dtype: Dtype) -> Recipe {
        Recipe { op: Op::DequantBlock { input: Box::new(self), scale: Box::new(scale), block, dtype } }
    }

    /// The checkpoints the recipe reads, each once, in the order first met.
    pub fn checkpoints(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        self.walk(&mut |r| {
            if let Op::Source { checkpoint, .. } = &r.op {
                if !out.contains(&checkpoint.as_str()) {
                    out.push(checkpoint);
                }
            }
        });
        out
    }

    fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Recipe)) {
        match &self.op {
            Op::Source { .. } => {}
            Op::Select { input, .. }
            | Op::Reshape { input, .. }
            | Op::Transpose { input, .. }
            | Op::Cast { input, .. }
            | Op::View { input, .. } => input.walk(f),
            Op::Concat { inputs, .. } => inputs.iter().for_each(|i| i.walk(f)),
            Op::DequantBlock { input, scale, .. } => {
                input.walk(f);
                scale.walk(f)
            }
        }
        f(self)
    }

    /// Appends the recipe's nodes in post-order (inputs before the node that uses them, as the
    /// JSON form and the daemon's node numbers have them); returns the output node.
    pub(crate) fn lower(&self, r: &mut RecipeHandle) -> Result<c_int> {
        match &self.op {
            Op::Source { checkpoint, tensor, sel } => r.source(checkpoint, tensor, sel.as_ref()),
            Op::Select { input, sel } => {
                let i = input.lower(r)?;
                r.select(i, sel)
            }
            Op::Concat { axis, inputs, stack } => {
                if inputs.is_empty() {
                    return Err(Error::local(
                        ErrorCode::EmptyInputs,
                        "concat and stack need at least one input",
                    ));
                }
                let idx = inputs.iter().map(|i| i.lower(r)).collect::<Result<Vec<_>>>()?;
                r.concat(*axis, &idx, *stack)
            }
            Op::Reshape { input, shape } => {
                let i = input.lower(r)?;
                r.reshape(i, shape)
            }
            Op::Transpose { input, perm } => {
                let i = input.lower(r)?;
                r.transpose(i, perm)
            }
            Op::Cast { input, dtype } => {
                let i = input.lower(r)?;
                r.cast(i, *dtype)
            }
            Op::View { input, dtype, shape } => {
                let i = input.lower(r)?;
                r.view(i, *dtype, shape)
            }
            Op::DequantBlock { input, scale, block, dtype } => {
                let i = input.lower(r)?;
                let s = scale.lower(r)?;
                r.dequant_block(i, s, block, *dtype)
            }
        }
    }

    pub(crate) fn to_handle(&self) -> Result<RecipeHandle> {
        let mut r = RecipeHandle::new()?;
        self.lower(&mut r)?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_are_values_and_name_their_checkpoints() {
        let a = Recipe::source("m", "w").cast(Dtype::F16);
        let b = Recipe::source("m", "w").cast(Dtype::F16);
        assert_eq!(a, b);
        let c = Recipe::concat(0, vec![a.clone(), Recipe::source("n", "v"), Recipe::source("m", "x")]);
        assert_eq!(c.checkpoints(), vec!["m", "n"]);
        assert_ne!(a, Recipe::source("m", "w").cast(Dtype::BF16));
    }

    #[test]
    fn lowering_appends_post_order_and_checks_locally() {
        let mut h = RecipeHandle::new().unwrap();
        let r = Recipe::stack(0, vec![Recipe::source("m", "a"), Recipe::source("m", "b")]).reshape(vec![4]);
        // nodes: a=0, b=1, stack=2, reshape=3
        assert_eq!(r.lower(&mut h).unwrap(), 3);
        let mut h = RecipeHandle::new().unwrap();
        let e = Recipe::concat(0, vec![]).lower(&mut h).unwrap_err();
        assert_eq!(e.code(), ErrorCode::EmptyInputs);
        let mut h = RecipeHandle::new().unwrap();
        let e = Recipe::source("m", "a").cast(Dtype::UNKNOWN).lower(&mut h).unwrap_err();
        assert_eq!((e.code(), e.node()), (ErrorCode::UnsupportedCast, Some(1)), "{e}");
    }
}
