"""What a value kiln cannot use does, per variable, is what docs/configuration.md's table says (its last column):
each row's variable is set to a value that is no setting, `kiln devices` runs (or `import kiln`, for the
package's own switches), and the outcome must be the documented class. A new variable, or a change of what
one does with a bad value, fails here until the table says so."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

import kiln

# The value tried for a row (its first variable, unless named here), and what else the run needs.
SAMPLES = {
    "KILN_CACHE_DIR": ("KILN_CACHE_DIR", ""),  # a path: only an empty one is no path
    "KILN_RECORD": ("KILN_RECORD", ""),
    "KILN_REMOTE_HTTP_USER": ("KILN_REMOTE_HTTP_PASSWORD_FILE", "no-such-file"),  # any user name is one
}
NOT_TRIED = {
    "KILN_REMOTE_HTTP_CA_FILE": "read by libcurl only in a TLS handshake, with a server to shake hands with",
    "HIPRTC_COMPILE_OPTIONS_APPEND": "any text is a value: HIPRTC's own, keyed",
    "KILN_LIBRARY": "the Python tests run on the KILN_LIBRARY they were given (tests/python/test_install.py "
                    "checks a bad one)",
    "KILN_TRITON_DIR": "any path is a folder to use; one that is not private is passed over with a warning "
                       "(tests/python/test_triton.py)",
}
HTTP_TIER = ("KILN_REMOTE_HTTP_",)


def table():
    """[(first variable of the row, the row's `an invalid value` cell)]."""
    with open(os.path.join(REPO, "docs", "configuration.md"), encoding="utf-8") as f:
        text = f.read()
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        variable = re.match(r"`([A-Z_][A-Z0-9_]*)", cells[0]).group(1)
        rows.append((variable, cells[-1]))
    return rows


def cli():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(kiln.library_path))), "tools", "kiln")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no kiln CLI beside {kiln.library_path}")
    return path


def run(args, variable, value, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") or k == "KILN_LIBRARY"}
    env.update(KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_LOG="warn", **extra)
    env[variable] = value
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


ROWS = table()


def test_every_row_says_what_an_invalid_value_does():
    known = re.compile(r"^(error|on|warning; (on|off|default|pack left out)|tier unusable|lane off|"
                       r"error at first use|-)$")
    bad = [(variable, cell) for variable, cell in ROWS if not known.match(cell)]
    assert not bad, f"rows of docs/configuration.md whose last column is none of the classes it explains: {bad}"
    assert len(ROWS) >= 30


@pytest.mark.parametrize("row", ROWS, ids=[variable for variable, _ in ROWS])
def test_an_invalid_value_does_what_the_table_says(row, tmp_path):
    first, documented = row
    if first in NOT_TRIED or documented == "-":
        pytest.skip(NOT_TRIED.get(first, "no value is invalid"))
    variable, value = SAMPLES.get(first, (first, "banana"))
    if variable == "KILN_TRITON_DIR_MAXSIZE":  # read by kiln.triton when it first bounds its folder
        code = "import warnings; warnings.simplefilter('always'); from kiln.triton import _files; _files.max_size()"
        result = run([sys.executable, "-c", code], variable, value, tmp_path, PYTHONPATH=os.path.join(REPO, "python"))
        assert result.returncode == 0, result.stderr
        assert documented == "warning; default"
        assert re.search(rf"Warning: kiln.triton: {variable} ignored: not a size: '{value}'", result.stderr), \
            result.stderr
        return
    if variable in ("KILN_CUPY", "KILN_CUDA_CORE", "KILN_TORCH"):
        code = "import warnings; warnings.simplefilter('always'); import kiln"
        result = run([sys.executable, "-c", code], variable, value, tmp_path, PYTHONPATH=os.path.join(REPO, "python"))
        assert result.returncode == 0, result.stderr
        assert documented == "warning; off"
        assert re.search(rf"Warning: {variable}='{value}' ignored", result.stderr), result.stderr
        return
    extra = {}
    if variable.startswith("KILN_REMOTE_") and variable != "KILN_REMOTE_CACHE":
        extra["KILN_REMOTE_CACHE"] = ("http://127.0.0.1:9/kiln" if variable.startswith(HTTP_TIER)
                                      else "redis://127.0.0.1:9")
    result = run([cli(), "devices"], variable, value, tmp_path, **extra)
    said = result.stdout + result.stderr
    named = variable in said or value in said
    if documented == "error":
        assert result.returncode == 2 and "kiln: error:" in result.stderr and variable in result.stderr, said
    elif documented == "on":
        assert result.returncode == 0, said
        mode = {"KILN_CACHE_DISABLE": "memory-only", "KILN_CACHE_READONLY": "read-only"}[variable]
        assert re.search(rf"^cache: .*\({mode}", result.stdout, re.MULTILINE), said
    elif documented.startswith("warning; "):
        assert result.returncode == 0, said
        assert re.search(rf"kiln: warning: .*{re.escape(value) if variable == 'KILN_CACHE_PACKS' else variable}",
                         result.stderr), said
        what = documented[len("warning; "):]
        if variable == "KILN_PCH":
            assert "precompiled headers: off" in result.stdout, said
        elif what in ("on", "default"):
            assert "lean header sets on" in said or "keeps its size" in said, said
    elif documented == "tier unusable":
        assert result.returncode == 0, said
        remote = [line for line in result.stdout.splitlines() if line.startswith("remote: ")]
        assert remote and "unusable" in remote[0] and named, said
    elif documented == "lane off":
        assert result.returncode == 0, said
        assert re.search(rf"(cuda|hip): off: .*{re.escape(value)}", result.stdout) or variable == "ROCM_PATH", said
    else:
        pytest.fail(f"{first}: no check for '{documented}'")
