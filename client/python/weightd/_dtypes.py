# SPDX-License-Identifier: Apache-2.0
"""weightd dtype names and their numpy and torch counterparts.

numpy has no bfloat16 or float8: numpy() gives BF16 as uint16 and F8_E4M3 / F8_E5M2 as uint8,
holding the raw bits (``.view()`` them with a library that knows the type, e.g. ml_dtypes).
torch gets BF16 as torch.bfloat16, and the FP8 types as torch.float8_e4m3fn / torch.float8_e5m2
where the installed torch has them (2.1 and later), else as uint8 holding the raw bits. Unsigned
16/32/64-bit integers become torch.uint16/32/64 where torch has them, else the signed type of
the same width holding the same bits. Packed GGUF block types (Q4_0, Q6_K, ...) come as uint8
bytes: the outer axes kept, the innermost axis replaced by its row's bytes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

ELEMENT_SIZES: Dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4,
    "F32": 4, "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
}

_NUMPY: Dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
    "F16": "float16", "BF16": "uint16", "U32": "uint32", "I32": "int32", "F32": "float32",
    "U64": "uint64", "I64": "int64", "F64": "float64", "F8_E4M3": "uint8", "F8_E5M2": "uint8",
}

# weightd dtype -> (torch attribute names in order of preference)
_TORCH: Dict[str, Tuple[str, ...]] = {
    "BOOL": ("bool",), "U8": ("uint8",), "I8": ("int8",), "U16": ("uint16", "int16"),
    "I16": ("int16",), "F16": ("float16",), "BF16": ("bfloat16",), "U32": ("uint32", "int32"),
    "I32": ("int32",), "F32": ("float32",), "U64": ("uint64", "int64"), "I64": ("int64",),
    "F64": ("float64",), "F8_E4M3": ("float8_e4m3fn", "uint8"),
    "F8_E5M2": ("float8_e5m2", "uint8"),
}


def is_packed(dtype: str) -> bool:
    """True for packed block types (GGUF quantizations), which have no element type."""
    return dtype not in ELEMENT_SIZES


def numpy_dtype(dtype: str) -> Any:
    """The numpy dtype weightd's `dtype` is exposed as (uint8 for packed block types)."""
    import numpy as np
    return np.dtype(_NUMPY.get(dtype, "uint8"))


def torch_dtype(dtype: str, torch_module: Optional[Any] = None) -> Any:
    """The torch dtype weightd's `dtype` is exposed as, in `torch_module` (default: the
    installed torch): the first of its candidates that this torch has."""
    if torch_module is None:
        import torch
        torch_module = torch
    for name in _TORCH.get(dtype, ("uint8",)):
        dt = getattr(torch_module, name, None)
        if dt is not None:
            return dt
    raise TypeError(f"this torch has no dtype for weightd dtype {dtype}")
