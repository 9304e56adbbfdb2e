# SPDX-License-Identifier: Apache-2.0
"""The asyncio forms: requests are sent at once and complete when the client's socket brings
the reply, so the event loop keeps running (a server loads while it serves)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import weightd
import wdtest

ROWS = 2048


@pytest.fixture
def daemon(tmp_path, start_daemon):
    rng = np.random.default_rng(9)
    tensors = {f"w{i}": rng.standard_normal((ROWS, 1024)).astype(np.float32) for i in range(4)}
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {k: ("F32", list(v.shape), v.tobytes())
                                    for k, v in tensors.items()})
    d = start_daemon({"m": path})
    d.tensors = tensors
    return d


def test_gets_and_loads_while_the_loop_runs(daemon):
    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.ensure_future(ticker())
        with daemon.connect() as c:
            before = ticks
            sd = await c.aload("m", framework="numpy")       # cold: the daemon reads 32 MiB
            during = ticks - before
            ws = await asyncio.gather(*(c.aget("m", f"w{i}", select={"range": [0, 0, 8]})
                                        for i in range(4)))
            rec = await c.aget_recipe({"op": "cast", "dtype": "F16",
                                       "input": {"op": "source", "checkpoint": "m",
                                                 "tensor": "w1"}})
            unit = await c.aload_unit({"slots": [
                {"name": "x", "recipe": {"op": "source", "checkpoint": "m", "tensor": "w2"}},
                {"name": "y", "alias": "x"}]})
        stop = True
        await tick_task
        return sd, ws, rec, unit, during

    sd, ws, rec, unit, during = asyncio.run(main())
    assert during > 0                  # the loop ran while the unit was being made
    assert sd.bytes_read == sum(v.nbytes for v in daemon.tensors.values())
    for k, v in daemon.tensors.items():
        np.testing.assert_array_equal(sd[k], v)
    for i, w in enumerate(ws):
        np.testing.assert_array_equal(w.numpy(), daemon.tensors[f"w{i}"][:8])
    np.testing.assert_array_equal(rec.numpy(), daemon.tensors["w1"].astype(np.float16))
    assert unit["x"].data_ptr() == unit["y"].data_ptr()
    np.testing.assert_array_equal(unit["x"].numpy(), daemon.tensors["w2"])


def test_errors_cancellation_and_close(daemon):
    async def main():
        c = daemon.connect()
        with pytest.raises(weightd.NotFound):
            await c.aget("m", "missing")
        with pytest.raises(weightd.InvalidArgument):
            await c.aload_unit({"slots": [{"name": "a", "dtype": "I8",
                                           "recipe": {"op": "source", "checkpoint": "m",
                                                      "tensor": "w0"}}]})
        task = asyncio.ensure_future(c.aget("m", "w3"))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        w = await c.aget("m", "w3")                  # the client still works
        pending = asyncio.ensure_future(c.aget("m", "w0", select={"range": [0, 5, 9]}))
        await asyncio.sleep(0)
        c.close()
        with pytest.raises(weightd.Disconnected):
            await pending
        return w

    w = asyncio.run(main())
    np.testing.assert_array_equal(w.numpy(), daemon.tensors["w3"])
