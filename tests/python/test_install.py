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


def _need_build_tools():
    missing = [m for m in ("pip", "setuptools", "wheel") if _run([sys.executable, "-c", f"import {m}"]).returncode]
    if missing:
        pytest.skip(f"{sys.executable} lacks {', '.join(missing)} (Debian: python3-pip python3-setuptools "
                    "python3-wheel)")


def _pip_install_target(what, target):
    result = _run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                   "--disable-pip-version-check", "--no-cache-dir", "--target", target, what],
                  PIP_NO_INDEX="1", PYTHONPATH=None)
    assert result.returncode == 0, result.stdout + result.stderr


def _check_pure_install(target):
    """Every subpackage and the version file; no binaries and no `kiln` command (this package brings no
    CLI); works with a libkiln of one's own (KILN_LIBRARY)."""
    for subpackage in ("cupy", "cuda_core"):
        assert os.path.isfile(os.path.join(target, "kiln", subpackage, "__init__.py")), subpackage
    assert any(name == f"kiln-{VERSION}.dist-info" for name in os.listdir(target)), os.listdir(target)
    assert not os.path.exists(os.path.join(target, "bin", "kiln"))
    for binaries in ("lib", "bin"):
        assert not os.path.exists(os.path.join(target, "kiln", binaries))
    probe = _run([sys.executable, "-c", PROBE + "; print(kiln.__version__)"], PYTHONPATH=target,
                 KILN_LIBRARY=kiln.library_path)
    assert probe.returncode == 0, probe.stderr
    package_file, library, api, version = probe.stdout.split()
    assert package_file.startswith(target)
    assert os.path.samefile(library, kiln.library_path)
    assert int(api) >= 1 and version == VERSION


def test_pip_install_offline(tmp_path):
    _need_build_tools()
    source = _copy_package(str(tmp_path / "src"))
    target = str(tmp_path / "site")
    _pip_install_target(source, target)
    _check_pure_install(target)


def test_sdist_installs_the_pure_package(tmp_path):
    _need_build_tools()
    source = _copy_package(str(tmp_path / "src"))
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=source, env=subprocess_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    sdist = str(tmp_path / "dist" / result.stdout.split()[-1])
    assert os.path.basename(sdist) == f"kiln-{VERSION}.tar.gz"
    target = str(tmp_path / "site")
    _pip_install_target(sdist, target)
    _check_pure_install(target)


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


def test_finds_library_in_a_debian_pip_prefix(tmp_path):
    """Debian's pip installs `--prefix P` under P/local/lib/pythonX.Y/dist-packages; `cmake --install --prefix P`
    puts libkiln in P/lib. The package finds it there (it used to look in P/local/lib only)."""
    prefix = tmp_path / "prefix"
    site = prefix / "local" / "lib" / "python3.11" / "dist-packages"
    site.mkdir(parents=True)
    (prefix / "lib").mkdir()
    shutil.copytree(os.path.join(PACKAGE_DIR, "kiln"), str(site / "kiln"), ignore=shutil.ignore_patterns("__pycache__"))
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


def _site_with_wheel_library(tmp_path, library):
    """A package laid out as the wheel lays it out, with `library` (a path, or text for a file that is
    no library) as kiln/lib/libkiln.so.0; the build's libkiln next to the package as well."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(PACKAGE_DIR, "kiln"), str(site / "kiln"), ignore=shutil.ignore_patterns("__pycache__"))
    (site / "kiln" / "lib").mkdir()
    if os.path.isabs(library):
        os.symlink(library, str(site / "kiln" / "lib" / "libkiln.so.0"))
    else:
        (site / "kiln" / "lib" / "libkiln.so.0").write_text(library)
    os.symlink(_library_file(), str(site / "kiln" / "libkiln.so"))
    return site


def test_wheel_library_comes_first_but_kiln_library_wins(tmp_path):
    site = _site_with_wheel_library(tmp_path, _library_file())
    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=str(site), KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[1] == str(site / "kiln" / "lib" / "libkiln.so.0")
    probe = _run([sys.executable, "-c", PROBE], PYTHONPATH=str(site), KILN_LIBRARY=kiln.library_path)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[1] == kiln.library_path


def test_broken_wheel_library_is_an_error_not_a_fallback(tmp_path):
    site = _site_with_wheel_library(tmp_path, "not a library\n")
    code = ("import kiln\ntry:\n    kiln.library_path\n"
            "except kiln.LibraryError as error:\n    print('LibraryError', error)\n")
    probe = _run([sys.executable, "-c", code], PYTHONPATH=str(site), KILN_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("LibraryError the libkiln this wheel carries, "), probe.stdout
    assert "libkiln.so.0" in probe.stdout and "KILN_LIBRARY" in probe.stdout


def test_kiln_command_without_the_cli_says_so(tmp_path):
    # The `kiln` command's entry point in a package that carries no CLI (only a damaged wheel does that).
    site = tmp_path / "site"
    shutil.copytree(os.path.join(PACKAGE_DIR, "kiln"), str(site / "kiln"), ignore=shutil.ignore_patterns("__pycache__"))
    probe = _run([sys.executable, "-c", "import sys; from kiln._cli import main; sys.exit(main())", "devices"],
                 PYTHONPATH=str(site))
    assert probe.returncode == 2, probe.stdout + probe.stderr
    assert probe.stderr.startswith("kiln: error: this kiln package carries no kiln CLI"), probe.stderr


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
