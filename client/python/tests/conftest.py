# SPDX-License-Identifier: Apache-2.0
"""pytest fixtures: a private weightd per test (see wdtest.Daemon)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wdtest  # noqa: E402


@pytest.fixture
def start_daemon(tmp_path):
    """start_daemon({name: path}, extra="daemon lines", sections="more sections") -> Daemon,
    stopped (and its segments removed) when the test ends."""
    started = []

    def start(checkpoints, extra="", sections=""):
        d = wdtest.Daemon(checkpoints, extra, sections)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
