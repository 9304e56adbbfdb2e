# SPDX-License-Identifier: Apache-2.0
"""weightd dtype names and their numpy and torch counterparts.

numpy has no bfloat16 or float8: numpy() gives BF16 as uint16 and F8_E4M3 / F8_E5M2 as uint8,
holding the raw bits (``.view()`` them with a library that knows the type, e.g. ml_dtypes).
torch gets BF16 as torch.bfloat16, and the FP8 types as torch.float8_e4m3fn / torch.float8_e5m2
where the installed torch has them (2.1 and later), else as uint8 holding the raw bits. Unsigned
16/32/64-bit integers become torch.uint16/32/64 where torch has them, else the signed type of
the same width holding the same bits. Packed GGUF block types (Q4_0, Q6_K, ...) come as uint8
bytes: the outer axes kept, the innermost axis replaced by its row's bytes.

The other way, :func:`dtype_name` turns what a caller has at hand (a torch.dtype, a numpy dtype,
or a common spelling such as "bf16" or "float32") into weightd's name of it.
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


# Spellings of the element types, lower case: weightd's own, the short ones in common use, and the
# names torch, numpy and ml_dtypes give them. "float", "int" and "long" are left out on purpose:
# they mean 32 bits to torch and 64 to numpy.
_ALIASES: Dict[str, str] = {name.lower(): name for name in ELEMENT_SIZES}
for _name, _spellings in {
    "BOOL": ("bool", "bool_"),
    "U8": ("uint8",), "I8": ("int8",),
    "U16": ("uint16",), "I16": ("int16", "short"),
    "F16": ("float16", "fp16", "half"), "BF16": ("bfloat16",),
    "U32": ("uint32",), "I32": ("int32",),
    "F32": ("float32", "fp32"),
    "U64": ("uint64",), "I64": ("int64",),
    "F64": ("float64", "fp64", "double"),
    "F8_E4M3": ("float8_e4m3fn", "fp8_e4m3", "fp8_e4m3fn"),
    "F8_E5M2": ("float8_e5m2", "fp8_e5m2"),
}.items():
    for _s in _spellings:
        _ALIASES[_s] = _name


def dtype_name(dtype: Any) -> str:
    """weightd's name of a dtype given as a torch.dtype (``torch.bfloat16``), a numpy dtype or
    scalar type (``np.float16``, ``np.dtype("float32")``), or a string: weightd's name or a
    common alias, in any case (``"BF16"``, ``"bf16"``, ``"bfloat16"``, ``"fp16"``, ``"half"``,
    ``"f32"``, ``"float32"``...). Another string is returned as given (a packed GGUF type such
    as ``"Q8_0"``, or a name weightd will refuse, saying so). TypeError for a torch or numpy
    type weightd has no counterpart of, and for anything else."""
    if isinstance(dtype, str):
        return _ALIASES.get(dtype.strip().lower(), dtype)
    module = type(dtype).__module__ or ""
    if module == "torch" or module.startswith("torch."):
        spelling = str(dtype)
        spelling = spelling[len("torch."):] if spelling.startswith("torch.") else spelling
    elif isinstance(dtype, type) or module == "numpy" or module.startswith("numpy."):
        try:
            import numpy as np
            spelling = np.dtype(dtype).name
        except (ImportError, TypeError) as e:
            raise TypeError(f"dtype must be a str, a torch.dtype or a numpy dtype, not "
                            f"{dtype!r}") from e
    else:
        raise TypeError(f"dtype must be a str, a torch.dtype or a numpy dtype, not {dtype!r}")
    name = _ALIASES.get(spelling.lower())
    if name is None:
        raise TypeError(f"weightd has no dtype for {dtype!r}; its types are "
                        f"{', '.join(ELEMENT_SIZES)}")
    return name


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
