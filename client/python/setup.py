# SPDX-License-Identifier: Apache-2.0
"""Builds weightd._weightd against an installed libweightd, found with pkg-config
(PKG_CONFIG_PATH points elsewhere than the system's). Metadata is in pyproject.toml.

    pip install ./client/python                          (pip fetches setuptools and wheel)
    pip install --no-build-isolation ./client/python     (offline: Debian's setuptools and
                                                          wheel, e.g. in a venv made with
                                                          --system-site-packages)
"""

import glob
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup


def pkgconfig(*args: str) -> str:
    try:
        return subprocess.check_output(["pkg-config", *args, "libweightd"], text=True).strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"weightd: pkg-config cannot find libweightd ({e}); install libweightd "
                 "(cmake --install) or set PKG_CONFIG_PATH to its lib/pkgconfig")


# setuptools before 70.1 builds wheels only with the `wheel` package. pip's isolated build
# installs it; --no-build-isolation in a plain venv has none, and setuptools would only say
# "invalid command 'bdist_wheel'".
if {"bdist_wheel", "dist_info"} & set(sys.argv):   # dist_info: pip's metadata step
    try:
        import wheel  # noqa: F401
    except ImportError:
        try:
            from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        except ImportError:
            sys.exit("weightd: building a wheel needs the `wheel` package, which this environment "
                     "lacks: drop --no-build-isolation (pip then fetches setuptools and wheel), "
                     "or `pip install wheel` first, or make the venv with --system-site-packages "
                     "to use Debian's python3-wheel")

here = os.path.dirname(os.path.abspath(__file__))
libdir = pkgconfig("--variable=libdir")
link = shlex.split(pkgconfig("--libs"))
if libdir and libdir not in ("/usr/lib", "/lib", "/usr/lib/x86_64-linux-gnu"):
    link.append(f"-Wl,-rpath,{libdir}")   # found at run time where it was found at build time

setup(ext_modules=[Extension(
    "weightd._weightd",
    sources=sorted(os.path.relpath(p, here) for p in glob.glob(os.path.join(here, "src", "*.c"))),
    depends=[os.path.relpath(os.path.join(here, "src", "pyweightd.h"), here)],
    extra_compile_args=shlex.split(pkgconfig("--cflags")) + ["-std=gnu11",
                                                             "-fvisibility=hidden"],
    extra_link_args=link,
)])
