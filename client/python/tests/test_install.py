# SPDX-License-Identifier: Apache-2.0
"""The package installs two ways, both against a libweightd installed in a DESTDIR: by
`cmake --install` (into the dist-packages directory Debian's /usr/bin/python3 searches for the
prefix) and by `pip install --no-build-isolation` offline with Debian's setuptools, finding
libweightd through pkg-config. Either installed copy imports and serves a weight."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import wdtest

CHECK = r"""
import sys, weightd
assert weightd.__file__.startswith(sys.argv[2]), weightd.__file__
with weightd.connect(sys.argv[1]) as c:
    print(c.get("m", "t").numpy().tobytes().hex())
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    build = os.environ.get("WD_BUILD_DIR")
    if not build:
        pytest.fail("WD_BUILD_DIR is not set (run through ctest)")
    tmp = tmp_path_factory.mktemp("install")
    root = tmp / "root"
    subprocess.run(["cmake", "--install", build], check=True, capture_output=True,
                   env=dict(os.environ, DESTDIR=str(root)))
    return tmp, root


def python_env(root, pythonpath: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath + os.pathsep + os.pathsep.join(
        p for p in sys.path if "dist-packages" in p)          # numpy and torch of Debian
    libs = sorted({os.path.dirname(p) for p in glob.glob(f"{root}/**/libweightd.so.*",
                                                         recursive=True)})
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    return env


@pytest.fixture
def daemon(tmp_path, start_daemon):
    path = str(tmp_path / "m.safetensors")
    wdtest.write_safetensors(path, {"t": ("F32", [4], np.arange(4, dtype=np.float32).tobytes())})
    return start_daemon({"m": path})


def test_cmake_install_puts_it_where_python_finds_it(installed, daemon):
    tmp, root = installed
    exts = glob.glob(f"{root}/**/dist-packages/weightd/_weightd*.so", recursive=True)
    assert len(exts) == 1, exts
    site = os.path.dirname(os.path.dirname(exts[0]))
    for f in ("__init__.py", "torch.py", "errors.py", "py.typed", "_weightd.pyi"):
        assert os.path.exists(os.path.join(site, "weightd", f)), f
    # the same directory, without the DESTDIR, is on the system interpreter's path
    searched = subprocess.run([wdtest.PY, "-c", "import sys; print('\\n'.join(sys.path))"],
                              capture_output=True, text=True, check=True,
                              env={"PATH": "/usr/bin:/bin"}).stdout.split()
    assert site[len(str(root)):] in searched, (site, searched)
    out = subprocess.run([wdtest.PY, "-c", CHECK, daemon.sock, site], capture_output=True,
                         text=True, env=python_env(root, site), cwd=str(tmp))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == np.arange(4, dtype=np.float32).tobytes().hex()


def test_pip_install_offline_against_pkg_config(installed, daemon):
    tmp, root = installed
    src = tmp / "src"
    shutil.copytree(os.path.dirname(wdtest.HERE), src,
                    ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    pcdir = glob.glob(f"{root}/**/pkgconfig/libweightd.pc", recursive=True)
    assert pcdir
    site = tmp / "site"
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcdir[0]),
               PKG_CONFIG_SYSROOT_DIR=str(root), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([wdtest.PY, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(src)], capture_output=True, text=True,
                       env=env, cwd=str(tmp))
    assert r.returncode == 0, r.stdout + r.stderr
    assert glob.glob(f"{site}/weightd/_weightd*.so")
    assert os.path.exists(site / "weightd" / "py.typed")
    out = subprocess.run([wdtest.PY, "-c", CHECK, daemon.sock, str(site)], capture_output=True,
                         text=True, env=python_env(root, str(site)), cwd=str(tmp))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == np.arange(4, dtype=np.float32).tobytes().hex()


def test_pip_in_a_venv_without_wheel_says_what_to_do(installed, tmp_path):
    """A plain venv has setuptools but not wheel: --no-build-isolation cannot build a wheel
    there, and the message must say how to get one, not only "invalid command 'bdist_wheel'"."""
    tmp, root = installed
    src = tmp / "src-venv"
    shutil.copytree(os.path.dirname(wdtest.HERE), src,
                    ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    pcdir = glob.glob(f"{root}/**/pkgconfig/libweightd.pc", recursive=True)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcdir[0]),
               PKG_CONFIG_SYSROOT_DIR=str(root), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp_path / "venv"
    subprocess.run([wdtest.PY, "-m", "venv", str(venv)], check=True)
    if subprocess.run([str(venv / "bin" / "python"), "-c", "import wheel"],
                      capture_output=True).returncode == 0:
        pytest.skip("this venv has wheel")
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                        "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, env=env, cwd=str(tmp))
    assert r.returncode != 0
    assert "--system-site-packages" in r.stdout + r.stderr, r.stdout + r.stderr

    # the way the message gives: a venv that sees Debian's setuptools and wheel installs it
    venv2 = tmp_path / "venv2"
    subprocess.run([wdtest.PY, "-m", "venv", "--system-site-packages", str(venv2)], check=True)
    r = subprocess.run([str(venv2 / "bin" / "python"), "-m", "pip", "install",
                        "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, env=env, cwd=str(tmp))
    assert r.returncode == 0, r.stdout + r.stderr
    assert glob.glob(f"{venv2}/lib/python3*/site-packages/weightd/_weightd*.so")
