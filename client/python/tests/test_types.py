# SPDX-License-Identifier: Apache-2.0
"""The package's annotations and stubs (py.typed, _weightd.pyi) type-check with mypy, and so
does code using them as docs/python.md shows (examples/engine.py)."""

from __future__ import annotations

import os
import subprocess

import weightd
import wdtest


def test_mypy_accepts_the_package_and_the_example(tmp_path):
    pkg = os.path.dirname(os.path.dirname(weightd.__file__))
    example = os.path.join(wdtest.HERE, "..", "..", "..", "examples", "engine.py")
    # numpy and torch are taken as Any: checking their own sources takes minutes
    conf = tmp_path / "mypy.ini"
    conf.write_text("[mypy]\nignore_missing_imports = True\nfollow_imports = silent\n"
                    "[mypy-torch.*]\nfollow_imports = skip\n"
                    "[mypy-numpy.*]\nfollow_imports = skip\n")
    for target in (["-p", "weightd"], [example]):
        r = subprocess.run([wdtest.PY, "-m", "mypy", "--config-file", str(conf),
                            "--cache-dir", str(tmp_path / "cache"), *target],
                           capture_output=True, text=True, cwd=pkg,
                           env=dict(os.environ, MYPYPATH=pkg))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Success" in r.stdout
