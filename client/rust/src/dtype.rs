// SPDX-License-Identifier: Apache-2.0
//! Dtypes by their safetensors (and ggml) names, and the Rust element types of the plain ones.
use std::fmt;

/// A dtype weightd knows: the safetensors names ("F32", "BF16", ...) and ggml's packed block
/// types ("Q4_0", "Q4_K", ...). Compare, print, or get the element size of the plain ones.
///
/// ```
/// use weightd::Dtype;
///
/// assert_eq!(Dtype::from_name("BF16"), Some(Dtype::BF16));
/// assert_eq!(Dtype::BF16.element_bytes(), Some(2));
/// assert_eq!(Dtype::from_name("Q4_K").unwrap().element_bytes(), None); // packed blocks
/// assert_eq!(Dtype::from_name("F17"), None);
/// assert_eq!(Dtype::F32.to_string(), "F32");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dtype(&'static str);

/// (name, bytes per element; 0 for packed block types)
const DTYPES: &[(&str, usize)] = &[
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("U16", 2),
    ("I16", 2),
    ("F16", 2),
    ("BF16", 2),
    ("U32", 4),
    ("I32", 4),
    ("F32", 4),
    ("U64", 8),
    ("I64", 8),
    ("F64", 8),
    ("F8_E4M3", 1),
    ("F8_E5M2", 1),
    ("Q4_0", 0),
    ("Q4_1", 0),
    ("Q5_0", 0),
    ("Q5_1", 0),
    ("Q8_0", 0),
    ("Q8_1", 0),
    ("Q2_K", 0),
    ("Q3_K", 0),
    ("Q4_K", 0),
    ("Q5_K", 0),
    ("Q6_K", 0),
    ("Q8_K", 0),
    ("IQ2_XXS", 0),
    ("IQ2_XS", 0),
    ("IQ3_XXS", 0),
    ("IQ1_S", 0),
    ("IQ4_NL", 0),
    ("IQ3_S", 0),
    ("IQ2_S", 0),
    ("IQ4_XS", 0),
    ("IQ1_M", 0),
    ("TQ1_0", 0),
    ("TQ2_0", 0),
    ("MXFP4", 0),
];

impl Dtype {
    pub const BOOL: Dtype = Dtype("BOOL");
    pub const U8: Dtype = Dtype("U8");
    pub const I8: Dtype = Dtype("I8");
    pub const U16: Dtype = Dtype("U16");
    pub const I16: Dtype = Dtype("I16");
    pub const F16: Dtype = Dtype("F16");
    pub const BF16: Dtype = Dtype("BF16");
    pub const U32: Dtype = Dtype("U32");
    pub const I32: Dtype = Dtype("I32");
    pub const F32: Dtype = Dtype("F32");
    pub const U64: Dtype = Dtype("U64");
    pub const I64: Dtype = Dtype("I64");
    pub const F64: Dtype = Dtype("F64");
    pub const F8_E4M3: Dtype = Dtype("F8_E4M3");
    pub const F8_E5M2: Dtype = Dtype("F8_E5M2");
    /// What a name this crate does not know maps to (a newer daemon's dtype).
    pub const UNKNOWN: Dtype = Dtype("UNKNOWN");

    /// The dtype of that name (case as weightd spells it), or `None`.
    pub fn from_name(name: &str) -> Option<Dtype> {
        DTYPES.iter().find(|(n, _)| *n == name).map(|(n, _)| Dtype(n))
    }

    pub(crate) fn from_name_or_unknown(name: &str) -> Dtype {
        Dtype::from_name(name).unwrap_or(Dtype::UNKNOWN)
    }

    pub fn name(self) -> &'static str {
        self.0
    }

    /// Bytes per element of an element type; `None` for packed block types.
    pub fn element_bytes(self) -> Option<usize> {
        DTYPES.iter().find(|(n, _)| *n == self.0).map(|(_, b)| *b).filter(|b| *b > 0)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.0)
    }
}

impl fmt::Debug for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type a weight's bytes may be viewed as (`Weight::as_slice`): plain integers and
/// floats, for which every bit pattern is a value and that have no padding. BF16 and F16 are
/// viewed as their `u16` bits, the FP8 types as `u8`.
pub trait Element: sealed::Sealed + Copy + 'static {
    /// The dtypes whose elements are this type (or its bits).
    const DTYPES: &'static [Dtype];
}

macro_rules! element {
    ($t:ty, $($d:expr),+) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPES: &'static [Dtype] = &[$($d),+];
        }
    };
}

element!(u8, Dtype::U8, Dtype::BOOL, Dtype::F8_E4M3, Dtype::F8_E5M2);
element!(i8, Dtype::I8);
element!(u16, Dtype::U16, Dtype::F16, Dtype::BF16);
element!(i16, Dtype::I16);
element!(u32, Dtype::U32);
element!(i32, Dtype::I32);
element!(u64, Dtype::U64);
element!(i64, Dtype::I64);
element!(f32, Dtype::F32);
element!(f64, Dtype::F64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_dtypes_have_sizes_and_names() {
        for (n, _) in DTYPES {
            assert_eq!(Dtype::from_name(n).unwrap().name(), *n);
        }
        assert_eq!(Dtype::F64.element_bytes(), Some(8));
        assert_eq!(Dtype::UNKNOWN.element_bytes(), None);
        assert_eq!(Dtype::from_name_or_unknown("NEW"), Dtype::UNKNOWN);
    }
}
