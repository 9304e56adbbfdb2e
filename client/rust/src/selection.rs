// SPDX-License-Identifier: Apache-2.0
//! Which part of a source tensor a request or a recipe reads.

/// Which part of a source tensor to take (axes count from the outermost, 0 first). Bounds are
/// checked by the daemon against the tensor (`OutOfRange`, `AxisOutOfRange`).
///
/// ```
/// use weightd::Selection;
///
/// // tensor-parallel rank 1 of 4 along the rows (torch.tensor_split's rule when 4 does not
/// // divide them)
/// let shard = Selection::shard(0, 1, 4);
/// assert_eq!(shard, Selection::Shard { axis: 0, rank: 1, world: 4 });
/// let rows = Selection::range(0, 8, 16);
/// let picked = Selection::indices(1, vec![3, 1, 2]);
/// let flat = Selection::elements(0, 64, vec![8, 8]);
/// assert_ne!(rows, picked);
/// # let _ = (flat, Selection::full());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Selection {
    /// The whole tensor.
    Full,
    /// `[start, end)` along `axis`, the other axes whole.
    Range { axis: u32, start: u64, end: u64 },
    /// The listed positions along `axis`, in that order (repeats allowed).
    Indices { axis: u32, indices: Vec<u64> },
    /// Elements `[start, end)` of the row-major flattened tensor, reshaped to `shape`.
    Elements { start: u64, end: u64, shape: Vec<u64> },
    /// The part tensor-parallel rank `rank` of `world` takes along `axis`.
    Shard { axis: u32, rank: u32, world: u32 },
}

impl Selection {
    pub fn full() -> Selection {
        Selection::Full
    }
    pub fn range(axis: u32, start: u64, end: u64) -> Selection {
        Selection::Range { axis, start, end }
    }
    pub fn indices(axis: u32, indices: Vec<u64>) -> Selection {
        Selection::Indices { axis, indices }
    }
    pub fn elements(start: u64, end: u64, shape: Vec<u64>) -> Selection {
        Selection::Elements { start, end, shape }
    }
    pub fn shard(axis: u32, rank: u32, world: u32) -> Selection {
        Selection::Shard { axis, rank, world }
    }
}
