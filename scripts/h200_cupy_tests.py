"""CuPy's own kernel tests, as shipped and with kiln.cupy, for comparing the counts and seeing what kiln
served. CuPy's wheel does not carry its tests: they come from CuPy's repository at the tag of the installed
version (copied into a folder with their conftest.py and package __init__ files; scripts/h200_run.sh's
`cupytests` mode expects them under .carry/cupy_tests).

  python3 scripts/h200_cupy_tests.py kiln|plain STATS_DIR TEST_FILE ... [-- PYTEST_ARGS]

Each mode runs with its own empty CUPY_CACHE_DIR and KILN_CACHE_DIR. With `kiln`, KILN_CUPY=1 routes every
pytest process (xdist workers too) through kiln.cupy; this file is also the pytest plugin that, at the end
of each process, writes kiln.cupy.stats() to STATS_DIR, and the runner prints their sum."""

import collections
import json
import os
import subprocess
import sys
import tempfile

if os.environ.get("KILN_CUPY") == "1":
    import kiln  # noqa: F401  (KILN_CUPY=1: routes CuPy once it is imported, in every pytest process)

_STATS_ENV = "KILN_CUPY_TESTS_STATS"


# --- the plugin (loaded by pytest in every process with -p h200_cupy_tests) --------------------------------
def pytest_sessionfinish(session, exitstatus):
    folder = os.environ.get(_STATS_ENV)
    if not folder or os.environ.get("KILN_CUPY") != "1":
        return
    import kiln.cupy

    stats = kiln.cupy.stats()
    stats.pop("seconds", None)
    with open(os.path.join(folder, f"stats-{os.getpid()}.json"), "w") as f:
        json.dump(stats, f, default=str)


# --- the runner -------------------------------------------------------------------------------------------
def summed(folder):
    """The sum of the stats files the processes wrote: routed, fallbacks, compile_errors, and the engines'
    compiles and hits."""
    total = {"routed": collections.Counter(), "fallbacks": collections.Counter(), "compile_errors": 0,
             "engine": collections.Counter(), "processes": 0}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("stats-"):
            continue
        with open(os.path.join(folder, name)) as f:
            stats = json.load(f)
        total["processes"] += 1
        total["routed"].update(stats.get("routed") or {})
        total["fallbacks"].update(stats.get("fallbacks") or {})
        total["compile_errors"] += stats.get("compile_errors") or 0
        engine = stats.get("engine") or {}
        total["engine"].update({k: v for k, v in engine.items() if k in ("compiles", "disk_hits", "memory_hits",
                                                                         "compile_failures", "pch_used", "pch_made")})
    return {k: dict(v) if isinstance(v, collections.Counter) else v for k, v in total.items()}


def main(argv):
    mode, stats_dir, rest = argv[0], argv[1], argv[2:]
    tests, extra = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    os.makedirs(stats_dir, exist_ok=True)
    env = dict(os.environ)
    env["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"cupy-cache-{mode}-")
    env["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"kiln-cache-{mode}-")
    env[_STATS_ENV] = os.path.abspath(stats_dir)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if mode == "kiln":
        env["KILN_CUPY"] = "1"
    else:
        env.pop("KILN_CUPY", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "h200_cupy_tests"] + extra + tests
    code = subprocess.call(command, env=env)
    if mode == "kiln":
        print("kiln.cupy stats over all processes:", json.dumps(summed(stats_dir), sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
