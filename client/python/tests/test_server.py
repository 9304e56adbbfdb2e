# SPDX-License-Identifier: Apache-2.0
"""Client.server_info reports the limits the daemon was configured with (its hello), so a
Python engine can size its requests before it makes them."""

from __future__ import annotations

import os
import time

import weightd
import wdtest


def test_server_info_reports_the_configured_limits(tmp_path, start_daemon):
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("U8", [4], b"abcd")})
    d = start_daemon({"m": path}, extra="\n".join([
        "max_frame = 2M", "max_message = 64M", "max_unit_entries = 5000",
        "segment_max = 16M", "client_max_bytes = 1G", "client_max_weights = 777",
        "client_max_queue_fds = 99", "idle_timeout = 7m", "frame_timeout = 11s",
        "client_max_segments = 123", "uid_max_segments = 456", "uid_max_weights = 789"]))
    with d.connect() as c:
        si = c.server_info
    assert isinstance(si, weightd.ServerInfo)
    assert si.max_frame_bytes == 2 << 20
    assert si.max_message_bytes == 64 << 20
    assert si.max_unit_entries == 5000
    assert si.segment_max_bytes == 16 << 20
    assert si.max_client_bytes == 1 << 30
    assert si.max_client_weights == 777
    assert si.max_queue_fds == 99
    assert si.idle_timeout_ms == 7 * 60 * 1000
    assert si.frame_timeout_ms == 11 * 1000
    assert si.max_client_segments == 123
    # the per-uid limits may be cut to the daemon's share of RLIMIT_NOFILE, never raised
    assert 0 < si.max_uid_segments <= 456
    assert si.max_uid_weights == 789
    assert si.min_protocol_version <= si.protocol_version <= si.max_protocol_version


def test_readiness_and_clients(tmp_path, start_daemon):
    """status() says whether the daemon is ready (its preloaded checkpoint resident), and
    clients() lists this connection with the name it gave and the bytes it holds."""
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"a": ("U8", [4], b"abcd"), "b": ("U8", [2], b"xy")})
    d = start_daemon({"m": path}, sections="[checkpoint:p]\npath = %s\npreload = yes\n" % path)
    with d.connect() as c:
        for _ in range(600):
            st = c.status(weights=False)
            if st.ready:
                break
            assert st.ready is False and "checkpoint p" in st.not_ready
            time.sleep(0.05)
        assert st.ready is True and st.not_ready == ""
        w = c.get("m", "a")
        mine = [x for x in c.clients() if x.pid == os.getpid()]
        assert len(mine) == 1
        assert isinstance(mine[0], weightd.ClientInfo)
        assert mine[0].uid == os.getuid() and mine[0].bytes == 4 and mine[0].weights == 1
        w.release()
