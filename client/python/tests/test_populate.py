# SPDX-License-Identifier: Apache-2.0
"""populate=True pre-faults every page of what load(), load_unit() and their asyncio forms bind
before they return: the pages are in this process's page tables (/proc/self/pagemap's present
bit) before anything reads them. Off by default: then they are not, until read."""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Dict, Tuple

import numpy as np
import pytest

import wdtest

PAGE = os.sysconf("SC_PAGE_SIZE")
# 4 MiB and 1 MiB + 1 byte: a few hundred pages, the second ending inside one
TENSORS = {"a": 4 << 20, "b": (1 << 20) + 1}


@pytest.fixture
def daemon(tmp_path, start_daemon):
    path = str(tmp_path / "p.safetensors")
    wdtest.write_safetensors(path, {n: ("U8", [k], bytes(range(256)) * (k // 256) +
                                        bytes(range(k % 256)))
                                    for n, k in TENSORS.items()})
    return start_daemon({"p": path})


def present(arrays: Dict[str, np.ndarray]) -> Tuple[int, int]:
    """Pages of the arrays in this process's page tables, and how many pages they span. Not
    mincore(): a segment's pages are in memory whether or not this process mapped them in."""
    have = total = 0
    with open("/proc/self/pagemap", "rb") as f:
        for a in arrays.values():
            addr = a.__array_interface__["data"][0]
            first, last = addr // PAGE, (addr + a.nbytes - 1) // PAGE
            f.seek(first * 8)
            raw = f.read((last - first + 1) * 8)
            ents = struct.unpack(f"<{last - first + 1}Q", raw)
            have += sum(e >> 63 for e in ents)
            total += len(ents)
    return have, total


def check_bytes(arrays: Dict[str, np.ndarray]) -> None:
    for n, k in TENSORS.items():
        assert arrays[n].nbytes == k
        assert bytes(arrays[n][:300]) == bytes(range(256)) + bytes(range(44))


def test_load_populate_prefaults_every_page(daemon):
    with daemon.connect() as c:
        sd = c.load("p", framework="numpy", populate=True)
        have, total = present(sd)
        assert have == total, f"{have} of {total} pages present after load(populate=True)"
        check_bytes(sd)
        sd.release()


def test_load_default_leaves_pages_to_fault_in(daemon):
    with daemon.connect() as c:
        sd = c.load("p", framework="numpy")
        have, total = present(sd)
        assert have < total // 4, f"{have} of {total} pages present before any read"
        check_bytes(sd)
        sd.release()


def test_load_unit_and_asyncio_forms_populate(daemon):
    spec = {"slots": [{"name": n, "recipe": {"op": "source", "checkpoint": "p", "tensor": n}}
                      for n in TENSORS]}
    with daemon.connect() as c:
        sd = c.load_unit(spec, framework="numpy", populate=True)
        have, total = present(sd)
        assert have == total
        sd.release()

    async def main() -> Tuple[Tuple[int, int], Tuple[int, int]]:
        with daemon.connect() as c:
            sd = await c.aload("p", framework="numpy", populate=True)
            first = present(sd)
            check_bytes(sd)
            sd.release()
        with daemon.connect() as c:
            sd = await c.aload_unit(spec, framework="numpy", populate=True)
            second = present(sd)
            sd.release()
        return first, second

    (h1, t1), (h2, t2) = asyncio.run(main())
    assert (h1, h2) == (t1, t2)

