# SPDX-License-Identifier: Apache-2.0
"""Every weightd dtype comes into numpy and torch with the right dtype and the checkpoint's own
bytes, without a copy; GGUF packed blocks, selections and recipes (cast, shard, concat) too.
load() takes its dtype as a torch or numpy dtype or a common alias, and says a shard on an axis
a tensor lacks in its caller's words."""

from __future__ import annotations

import asyncio
import types

import numpy as np
import pytest
import torch

import weightd
import wdtest

DTYPES = ["BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "I32", "F32", "U64", "I64",
          "F64", "F8_E4M3", "F8_E5M2"]
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
         "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
         "F16": np.float16, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32,
         "F32": np.float32, "U64": np.uint64, "I64": np.int64, "F64": np.float64,
         "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
# What the documentation promises for the installed torch: float8 types where it has them, else
# uint8; unsigned types without a torch dtype as the signed type of their width.
TORCH = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8,
         "U16": getattr(torch, "uint16", torch.int16), "I16": torch.int16,
         "F16": torch.float16, "BF16": torch.bfloat16,
         "U32": getattr(torch, "uint32", torch.int32), "I32": torch.int32,
         "F32": torch.float32, "U64": getattr(torch, "uint64", torch.int64),
         "I64": torch.int64, "F64": torch.float64,
         "F8_E4M3": getattr(torch, "float8_e4m3fn", torch.uint8),
         "F8_E5M2": getattr(torch, "float8_e5m2", torch.uint8)}
FORMATS = {"BOOL": "?", "U8": "B", "I8": "b", "U16": "H", "I16": "h", "F16": "e", "BF16": "H",
           "U32": "I", "I32": "i", "F32": "f", "U64": "Q", "I64": "q", "F64": "d",
           "F8_E4M3": "B", "F8_E5M2": "B"}
SHAPE = [3, 5]
SAME_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def torch_bytes(t: torch.Tensor) -> bytes:
    """A tensor's bytes, through a same-width integer view (numpy knows no bfloat16)."""
    return t.contiguous().view(SAME_WIDTH[t.element_size()]).numpy().tobytes()


@pytest.fixture
def all_dtypes(tmp_path, start_daemon):
    rng = np.random.default_rng(7)
    tensors = {}
    for dt in DTYPES:
        n = SHAPE[0] * SHAPE[1] * SIZES[dt]
        raw = (rng.integers(0, 2, n, dtype=np.uint8) if dt == "BOOL"
               else rng.integers(0, 256, n, dtype=np.uint8)).tobytes()
        tensors["t_" + dt] = (dt, SHAPE, raw)
    path = str(tmp_path / "all.safetensors")
    wdtest.write_safetensors(path, tensors)
    d = start_daemon({"all": path})
    with d.connect() as c:
        yield c, tensors


@pytest.mark.parametrize("dt", DTYPES)
def test_dtype_round_trips(all_dtypes, dt):
    c, tensors = all_dtypes
    raw = tensors["t_" + dt][2]
    w = c.get("all", "t_" + dt)
    assert (w.dtype, w.shape, w.nbytes) == (dt, tuple(SHAPE), len(raw))
    mv = memoryview(w)
    assert mv.readonly and mv.format == FORMATS[dt] and mv.itemsize == SIZES[dt]
    assert mv.shape == tuple(SHAPE) and mv.strides == (SHAPE[1] * SIZES[dt], SIZES[dt])
    assert mv.tobytes() == raw
    a = w.numpy()
    assert a.dtype == NUMPY[dt] and a.shape == tuple(SHAPE) and a.tobytes() == raw
    assert not a.flags.writeable
    t = w.torch()
    assert t.dtype == TORCH[dt] and tuple(t.shape) == tuple(SHAPE)
    assert torch_bytes(t) == raw
    # no copy: both views start where the weight is mapped
    assert t.data_ptr() == w._address() == a.__array_interface__["data"][0]


def test_numpy_and_torch_values(all_dtypes):
    c, tensors = all_dtypes
    raw = tensors["t_F32"][2]
    want = np.frombuffer(raw, np.float32).reshape(SHAPE)
    w = c.get("all", "t_F32")
    np.testing.assert_array_equal(w.numpy(), want)
    assert torch.equal(w.torch(), torch.from_numpy(want.copy()))
    bf = c.get("all", "t_BF16")
    bits = np.frombuffer(tensors["t_BF16"][2], np.uint16).astype(np.uint32) << 16
    want_bf = torch.from_numpy(bits.view(np.float32).reshape(SHAPE).copy()).to(torch.bfloat16)
    assert torch_bytes(bf.torch()) == torch_bytes(want_bf)


def test_torch_dtype_selection_follows_what_torch_has():
    old = types.SimpleNamespace(uint8="u8", int16="i16", int32="i32", int64="i64",
                                bfloat16="bf16")
    new = types.SimpleNamespace(uint8="u8", uint16="u16", int16="i16", bfloat16="bf16",
                                float8_e4m3fn="e4m3", float8_e5m2="e5m2")
    assert weightd.torch_dtype("F8_E4M3", old) == "u8"
    assert weightd.torch_dtype("F8_E5M2", old) == "u8"
    assert weightd.torch_dtype("U16", old) == "i16"
    assert weightd.torch_dtype("F8_E4M3", new) == "e4m3"
    assert weightd.torch_dtype("F8_E5M2", new) == "e5m2"
    assert weightd.torch_dtype("U16", new) == "u16"
    assert weightd.torch_dtype("BF16", old) == "bf16"
    assert weightd.torch_dtype("Q4_K", old) == "u8"    # packed blocks are bytes
    with pytest.raises(TypeError):
        weightd.torch_dtype("F16", old)                # this fake torch has no float16


def test_gguf_packed_blocks_and_dequantizing_cast(tmp_path, start_daemon):
    rng = np.random.default_rng(3)
    q4 = rng.integers(0, 256, 4 * 2 * 18, dtype=np.uint8).tobytes()   # [4, 64]: 2 blocks/row
    d = rng.uniform(-1, 1, 2 * 1).astype(np.float16)                  # Q8_0 [2, 32]: 1 block/row
    qs = rng.integers(-128, 128, (2, 32), dtype=np.int8)
    q8 = b"".join(d[i].tobytes() + qs[i].tobytes() for i in range(2))
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    path = str(tmp_path / "m.gguf")
    wdtest.write_gguf(path, {"q4": (wdtest.GGUF_Q4_0, [4, 64], q4),
                             "q8": (wdtest.GGUF_Q8_0, [2, 32], q8),
                             "f": (wdtest.GGUF_F32, [3, 4], f32.tobytes())})
    dm = start_daemon({"g": path})
    with dm.connect() as c:
        info = c.describe("g").tensor("q4")
        assert (info.dtype, info.shape, info.block_elems, info.block_bytes) == \
            ("Q4_0", (4, 64), 32, 18)
        w = c.get("g", "q4")
        assert (w.dtype, w.shape, w.nbytes) == ("Q4_0", (4, 64), len(q4))
        mv = memoryview(w)
        assert (mv.format, mv.shape, mv.itemsize) == ("B", (4, 36), 1)
        a = w.numpy()
        assert a.dtype == np.uint8 and a.shape == (4, 36) and a.tobytes() == q4
        t = w.torch()
        assert t.dtype == torch.uint8 and tuple(t.shape) == (4, 36) and torch_bytes(t) == q4
        rows = c.get("g", "q4", select={"range": [0, 1, 3]})   # whole rows of blocks
        assert rows.numpy().tobytes() == q4[36:108]
        deq = c.get_recipe({"op": "cast", "dtype": "F32",
                            "input": {"op": "source", "checkpoint": "g", "tensor": "q8"}})
        want = d.astype(np.float32)[:, None] * qs.astype(np.float32)
        np.testing.assert_array_equal(deq.numpy(), want)
        np.testing.assert_array_equal(c.get("g", "f").numpy(), f32)
        sd = c.load("g", dtype="F32", framework="numpy")
        np.testing.assert_array_equal(sd["q8"], want)
        np.testing.assert_array_equal(sd["f"], f32)
        assert sd["q4"].shape == (4, 64) and sd["q4"].dtype == np.float32


@pytest.fixture
def matrix(tmp_path, start_daemon):
    a = np.random.default_rng(11).standard_normal((7, 6)).astype(np.float32)
    b = np.random.default_rng(12).standard_normal((2, 6)).astype(np.float32)
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("F32", [7, 6], a.tobytes()),
                                    "b": ("F32", [2, 6], b.tobytes())})
    d = start_daemon({"m": path})
    with d.connect() as c:
        yield c, a, b


def test_selections(matrix):
    c, a, _ = matrix
    np.testing.assert_array_equal(c.get("m", "a", select="full").numpy(), a)
    np.testing.assert_array_equal(c.get("m", "a", select={"range": [1, 2, 5]}).numpy(), a[:, 2:5])
    np.testing.assert_array_equal(c.get("m", "a", select={"indices": [0, [6, 0, 0]]}).numpy(),
                                  a[[6, 0, 0]])
    np.testing.assert_array_equal(c.get("m", "a", select={"elements": [4, 16, [3, 4]]}).numpy(),
                                  a.reshape(-1)[4:16].reshape(3, 4))
    np.testing.assert_array_equal(c.get("m", "a", select=("range", 0, 0, 2)).numpy(), a[0:2])
    for rank, part in enumerate(np.array_split(a, 3, axis=0)):   # 7 rows: 3, 2, 2
        np.testing.assert_array_equal(
            c.get("m", "a", select={"shard": [0, rank, 3]}).numpy(), part)


def test_recipes_cast_shard_concat(matrix):
    c, a, b = matrix
    src = {"op": "source", "checkpoint": "m", "tensor": "a"}
    f16 = c.get_recipe({"op": "cast", "dtype": "F16", "input": src})
    assert f16.dtype == "F16"
    np.testing.assert_array_equal(f16.numpy(), a.astype(np.float16))
    bf16 = c.get_recipe('{"op": "cast", "dtype": "BF16", "input": {"op": "source", '
                        '"checkpoint": "m", "tensor": "a"}}')
    assert torch.equal(bf16.torch(), torch.from_numpy(a).to(torch.bfloat16))
    shard = c.get_recipe({"op": "cast", "dtype": "F16",
                          "input": dict(src, select={"shard": [1, 1, 2]})})
    np.testing.assert_array_equal(shard.numpy(), a[:, 3:6].astype(np.float16))
    cat = c.get_recipe({"op": "concat", "axis": 0,
                        "inputs": [src, {"op": "source", "checkpoint": "m", "tensor": "b"}]})
    np.testing.assert_array_equal(cat.numpy(), np.concatenate([a, b]))
    sd = c.load("m", dtype="F16", shard=(1, 0, 2))
    assert sd["a"].dtype == torch.float16
    np.testing.assert_array_equal(sd["a"].numpy(), a[:, 0:3].astype(np.float16))
    np.testing.assert_array_equal(sd["b"].numpy(), b[:, 0:3].astype(np.float16))
    per = c.load("m", shard={"a": (0, 2, 3)}, framework="numpy")
    np.testing.assert_array_equal(per["a"], np.array_split(a, 3)[2])
    np.testing.assert_array_equal(per["b"], b)
    # load() declares its recipes in the extension, not as JSON: the same recipe, the same
    # weight (the shard cast above, held by `shard`, is not read again)
    again = c.load("m", tensors=["a"], dtype="F16", shard=(1, 1, 2), framework="weight")
    assert again.bytes_read == 0 and again["a"].handle == shard.handle
    by_info = c.load("m", shard=lambda t: (0, 0, 2) if t.name == "b" else None,
                     framework="numpy")
    np.testing.assert_array_equal(by_info["b"], np.array_split(b, 2)[0])
    np.testing.assert_array_equal(by_info["a"], a)
    with pytest.raises(OverflowError):
        c.load("m", shard=(0, -1, 2))
    # the strict rule: 7 rows do not divide by 3, and the error says which rule refused them
    with pytest.raises(weightd.InvalidArgument) as e:
        c.load("m", tensors=["a"], shard=(0, 1, 3, True))
    assert e.value.code == "shape-mismatch"
    assert "rows 7 of axis 0 do not divide by world 3" in str(e.value)
    even = c.load("m", tensors=["a"], shard=(1, 1, 2, True), framework="numpy")
    np.testing.assert_array_equal(even["a"], a[:, 3:6])


def test_unit_with_alias(matrix):
    c, a, _ = matrix
    sd = c.load_unit({"slots": [
        {"name": "wte", "dtype": "F32", "shape": [7, 6],
         "recipe": {"op": "source", "checkpoint": "m", "tensor": "a"}},
        {"name": "lm_head", "alias": "wte"}]})
    assert set(sd) == {"wte", "lm_head"}
    assert sd["wte"].data_ptr() == sd["lm_head"].data_ptr()
    assert torch.equal(sd["wte"], torch.from_numpy(a))
    single = c.load_unit({"op": "source", "checkpoint": "m", "tensor": "a"}, framework="weight")
    assert list(single) == ["output"] and single["output"].shape == (7, 6)


def test_scalar(tmp_path, start_daemon):
    path = str(tmp_path / "s.safetensors")
    wdtest.write_safetensors(path, {"s": ("F64", [], np.float64(2.5).tobytes())})
    with start_daemon({"s": path}).connect() as c:
        w = c.get("s", "s")
        assert w.shape == () and memoryview(w).shape == () and memoryview(w).format == "d"
        assert w.numpy().shape == () and float(w.numpy()) == 2.5
        t = w.torch()
        assert t.shape == () and t.dtype == torch.float64 and t.item() == 2.5


def test_zero_element_tensors(tmp_path, start_daemon):
    path = str(tmp_path / "z.safetensors")
    wdtest.write_safetensors(path, {"z": ("BF16", [0, 4], b""),
                                    "a": ("F32", [2], np.ones(2, np.float32).tobytes())})
    with start_daemon({"z": path}).connect() as c:
        w = c.get("z", "z")
        assert (w.nbytes, w.shape, memoryview(w).shape) == (0, (0, 4), (0, 4))
        assert w.numpy().shape == (0, 4) and w.numpy().dtype == np.uint16
        t = w.torch()
        assert t.shape == (0, 4) and t.dtype == torch.bfloat16
        sd = c.load("z")
        assert sd["z"].shape == (0, 4) and sd["a"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("given,name", [
    ("BF16", "BF16"), ("bf16", "BF16"), ("bfloat16", "BF16"), ("BFloat16", "BF16"),
    ("float16", "F16"), ("fp16", "F16"), ("FP16", "F16"), ("half", "F16"), ("f16", "F16"),
    ("f32", "F32"), ("float32", "F32"), ("Float32", "F32"), ("fp32", "F32"), (" F32 ", "F32"),
    ("float64", "F64"), ("u8", "U8"), ("int8", "I8"), ("int64", "I64"), ("bool", "BOOL"),
    ("f8_e4m3", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
    (torch.bfloat16, "BF16"), (torch.float16, "F16"), (torch.half, "F16"),
    (torch.float32, "F32"), (torch.int64, "I64"), (torch.bool, "BOOL"), (torch.uint8, "U8"),
    (np.float16, "F16"), (np.dtype("float32"), "F32"), (np.dtype(np.int16), "I16"),
    (np.bool_, "BOOL"), (np.uint64, "U64"),
    ("Q8_0", "Q8_0"),          # a packed type is weightd's own name: passed as it is
])
def test_dtype_name_takes_torch_numpy_and_aliases(given, name):
    assert weightd.dtype_name(given) == name


@pytest.mark.parametrize("given", [torch.complex64, np.complex64, object(), 3, None])
def test_dtype_name_refuses_what_weightd_has_no_type_for(given):
    with pytest.raises(TypeError, match="dtype"):
        weightd.dtype_name(given)


def test_load_dtype_as_torch_numpy_or_alias(matrix):
    c, a, b = matrix
    want = {"a": torch.from_numpy(a), "b": torch.from_numpy(b)}
    for dtype, as_torch in ((torch.bfloat16, torch.bfloat16), ("bf16", torch.bfloat16),
                            ("BFloat16", torch.bfloat16), (np.float16, torch.float16),
                            ("fp16", torch.float16), ("Float16", torch.float16),
                            (np.dtype("float32"), torch.float32), ("f32", torch.float32)):
        sd = c.load("m", dtype=dtype)
        for k, t in sd.items():
            assert t.dtype == as_torch, (dtype, k)
            assert torch.equal(t, want[k].to(as_torch)), (dtype, k)
        sd.release()
    half = c.load("m", tensors=["a"], dtype=torch.float16, shard=(1, 0, 2), framework="weight")
    assert half["a"].dtype == "F16" and half["a"].shape == (7, 3)


@pytest.fixture
def with_vector(tmp_path, start_daemon):
    m = np.arange(24, dtype=np.float32).reshape(4, 6)
    v = np.arange(6, dtype=np.float32)
    path = str(tmp_path / "v.safetensors")
    wdtest.write_safetensors(path, {"w": ("F32", [4, 6], m.tobytes()),
                                    "bias": ("F32", [6], v.tobytes())})
    d = start_daemon({"m": path})
    with d.connect() as c:
        yield c


@pytest.mark.parametrize("kw", [dict(shard=(1, 0, 2)), dict(shard=(1, 0, 2), tensors=["bias"]),
                                dict(shard={"bias": (1, 1, 2)}),
                                dict(shard=lambda t: (1, 0, 2))])
def test_shard_on_an_axis_the_tensor_lacks_is_said_in_the_callers_words(with_vector, kw):
    c = with_vector
    with pytest.raises(weightd.InvalidArgument) as e:
        c.load("m", **kw)
    msg = str(e.value)
    assert 'tensor "bias"' in msg and "[6]" in msg and "(1 axis)" in msg, msg
    assert "axis 1" in msg and "shard" in msg, msg
    for jargon in ("node", "source", "selection", "recipe", "slot"):
        assert jargon not in msg, msg
    assert (e.value.code, e.value.tensor, e.value.axis) == ("axis-out-of-range", "bias", 1)
    with pytest.raises(weightd.InvalidArgument) as e:       # the asyncio form says the same
        asyncio.run(c.aload("m", **kw))
    assert str(e.value) == msg
    # the 2-d tensor beside it shards on axis 1 as asked
    ok = c.load("m", shard={"w": (1, 0, 2)}, framework="numpy")
    np.testing.assert_array_equal(ok["w"], np.arange(24, dtype=np.float32).reshape(4, 6)[:, :3])
