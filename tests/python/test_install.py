"""The package installs offline with pip (no build isolation) and finds libkiln the documented ways."""

import ctypes.util
import os
import re
import shutil
import subprocess
import sys

import pytest

import kiln
from conftest import REPO, subprocess_env

PACKAGE_DIR = os.path.join(REPO, "python")
PROBE = "import kiln, kiln.cupy; print(kiln.__file__); print(kiln.library_path); print(kiln.api_version())"
with open(os.path.join(PACKAGE_DIR, "kiln", "VERSION")) as _file:
    VERSION = _file.read().strip()


def _copy_package(destination):
    """A copy of python/ without build leftovers: pip builds in the source folder, which must not be the
    repository's."""
    shutil.copytree(PACKAGE_DIR, destination,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
    return destination


def _run(args, **env):
    return subprocess.run(args, env=subprocess_env(**env), capture_output=True, text=True, timeout=300)


def test_pip_install_offline(tmp_path):
    missing = [m for m in ("pip", "setuptools", "wheel") if _run([sys.executable, "-c", f"import {m}"]).returncode]
    if missing:
        pytest.skip(f"{sys.executable} lacks {', '.join(missing)} (Debian: python3-pip python3-setuptools "
                    "python3-wheel)")
    source = _copy_package(str(tmp_path / "src"))
    target = str(tmp_path / "site")
    result = _run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                   "--disable-pip-version-check", "--no-cache-dir", "--target", target, source],
                  PIP_NO_INDEX="1", PYTHONPATH=None)
    assert result.returncode == 0, result.stdout + result.stderr
    for subpackage in ("cupy", "cuda_core"):
        assert os.path.isfile(os.path.join(target, "kiln", subpackage, "__init__.py")), subpackage
    assert any(name == f"kiln-{VERSION}.dist-info" for name in os.listdir(target)), os.listdir(target)

    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=target, KILN_LIBRARY=kiln.library_path)
    assert probe.returncode == 0, probe.stderr
    package_file, library, version = probe.stdout.split()
    assert package_file.startswith(target)
    assert os.path.samefile(library, kiln.library_path)
    assert int(version) >= 1


def test_version_is_the_version_file():
    assert kiln.__version__ == VERSION and re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def _library_file():
    return os.path.realpath(kiln.library_path)


def test_finds_library_in_install_tree(tmp_path):
    prefix = tmp_path / "prefix"
    site = prefix / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    _copy_package(str(tmp_path / "src"))
    shutil.copytree(str(tmp_path / "src" / "kiln"), str(site / "kiln"))
    os.symlink(_library_file(), str(prefix / "lib" / "libkiln.so"))
    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=str(site), KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[1] == str(prefix / "lib" / "libkiln.so")


def test_finds_library_next_to_package(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(os.path.join(PACKAGE_DIR, "kiln"), str(site / "kiln"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(_library_file(), str(site / "kiln" / "libkiln.so"))
    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=str(site), KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[1] == str(site / "kiln" / "libkiln.so")


def test_finds_library_in_the_source_tree_build():
    # Straight from the checkout (PYTHONPATH=python) without KILN_LIBRARY: a build*/engine/libkiln.so.
    import glob
    if not glob.glob(os.path.join(REPO, "build*", "engine", "libkiln.so")):
        pytest.skip("no build*/engine/libkiln.so in this checkout (the build folder is elsewhere)")
    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=PACKAGE_DIR, KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert "/engine/libkiln.so" in probe.stdout.split()[1]


def test_bad_kiln_library_is_an_error_not_a_fallback(tmp_path):
    code = ("import kiln\n"
            "try:\n    kiln.Engine()\nexcept kiln.LibraryError as error:\n    print('LibraryError', error)\n")
    probe = _run([sys.executable, "-c", code], PYTHONPATH=PACKAGE_DIR, KILN_LIBRARY=str(tmp_path / "nope.so"))
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("LibraryError KILN_LIBRARY=") and "nope.so" in probe.stdout


def test_not_found_says_where_it_looked(tmp_path):
    if ctypes.util.find_library("kiln"):
        pytest.skip("libkiln is installed system-wide here")
    site = tmp_path / "site"
    shutil.copytree(os.path.join(PACKAGE_DIR, "kiln"), str(site / "kiln"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import kiln\ntry:\n    kiln.library_path\n"
            "except OSError as error:\n    print(type(error).__name__, error)\n")
    probe = _run([sys.executable, "-c", code], PYTHONPATH=str(site), KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("LibraryError libkiln.so not found: set KILN_LIBRARY"), probe.stdout
