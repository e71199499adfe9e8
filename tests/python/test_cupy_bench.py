"""The pure-Python parts of bench/cupy_bench.py (the benchmark itself needs CuPy and a GPU)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO, subprocess_env

BENCH = os.path.join(REPO, "bench", "cupy_bench.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cupy_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_median_and_table(bench):
    assert bench.median([3.0, 1.0, 2.0]) == 2.0
    assert bench.median([]) != bench.median([])  # nan
    table = bench.format_table([["cupy", "cold", 20, 1234.5678], ["kiln", "warm", 20, float("nan")]],
                               ["mode", "caches", "compiles", "prepare ms"])
    lines = table.splitlines()
    assert lines[0].split() == ["mode", "caches", "compiles", "prepare", "ms"]
    assert "1235" in lines[2] and lines[3].rstrip().endswith("-")
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_compare_outputs(bench, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert bench.compare_outputs(str(a), str(b)) == [("*", "no .npy outputs")]
    (a / "00_x.npy").write_bytes(b"same")
    (b / "00_x.npy").write_bytes(b"same")
    (a / "report.json").write_text("{}")  # not an output
    assert bench.compare_outputs(str(a), str(b)) == []
    (a / "01_y.npy").write_bytes(b"abcd")
    (b / "01_y.npy").write_bytes(b"abXd")
    (a / "02_z.npy").write_bytes(b"only here")
    assert bench.compare_outputs(str(a), str(b)) == [("01_y.npy", "differs from byte 2 (4 vs 4 bytes)"),
                                                     ("02_z.npy", "missing in other run")]


def test_prewarm_problems(bench):
    good = {"calls": 3, "kiln": {"routed": {"disk": 3}, "fallbacks": {}, "engine": {"compiles": 0}}}
    assert bench.prewarm_problems(good) == []
    compiled = {"calls": 3, "kiln": {"routed": {"disk": 2, "compiled": 1}, "fallbacks": {},
                                     "engine": {"compiles": 1}}}
    problems = bench.prewarm_problems(compiled)
    assert any("not from disk" in p for p in problems) and any("compiled 1" in p for p in problems)
    fallback = {"calls": 3, "kiln": {"routed": {"disk": 2}, "fallbacks": {"jitify": 1}, "engine": {"compiles": 0}}}
    assert bench.prewarm_problems(fallback) == ["compiled by CuPy instead: {'jitify': 1}"]
    assert "no kernel came from disk" in bench.prewarm_problems({"calls": 0, "kiln": None})


def test_breakdown_and_step_differences(bench):
    plain = {"mode": "cupy", "compile_seconds": 1.0, "preprocess_seconds": 0.5, "nvrtc_seconds": 0.25,
             "cache_read_seconds": 0.05, "steps": [["a", 0.3, 0.1], ["b", 0.2, 0.0]]}
    parts = bench.breakdown(plain)
    assert list(parts) == ["preprocess", "nvrtc", "cache read", "rest"]
    assert parts["rest"] == pytest.approx(0.2)
    parts = bench.breakdown(dict(plain, module_load_seconds=0.15))  # module loads timed (a subclass of Module)
    assert list(parts) == ["preprocess", "nvrtc", "cache read", "load", "rest"]
    assert parts["load"] == pytest.approx(0.15) and parts["rest"] == pytest.approx(0.05)
    routed = {"mode": "kiln", "compile_seconds": 0.4, "steps": [["a", 0.5, 0.1], ["b", 0.2, 0.1]],
              "kiln": {"seconds": {"kiln": 0.3, "load": 0.05}, "engine": {"compile_nanoseconds": 100_000_000}}}
    parts = bench.breakdown(routed)
    assert parts["nvrtc"] == pytest.approx(0.1) and parts["kiln"] == pytest.approx(0.2)
    assert parts["load"] == pytest.approx(0.05) and parts["rest"] == pytest.approx(0.05)
    assert parts["kiln.cupy"] == 0.0
    # step a: 200 ms outside preparation with CuPy, 400 ms with kiln; step b: 200 -> 100
    rows = bench.step_differences([plain], [routed])
    assert [row[0] for row in rows] == ["a", "b"]
    assert rows[0][1] == pytest.approx(200.0) and rows[0][2] == pytest.approx(400.0)


def test_pair_ratios(bench):
    cupy = [{"compile_seconds": 2.0}, {"compile_seconds": 4.0}, {"compile_seconds": 0.0}]
    kiln = [{"compile_seconds": 1.0}, {"compile_seconds": 5.0}, {"compile_seconds": 1.0}]
    # Pair by pair, in run order; a CuPy run that took no time gives no ratio.
    assert bench.pair_ratios(cupy, kiln) == [0.5, 1.25]
    assert bench.pair_ratios(cupy[:1], kiln) == [0.5]


def test_child_env(bench):
    env = bench.child_env({"KILN_CUPY": "1", "KILN_RECORD": "/x", "PYTHONPATH": "/p", "KEEP": "k"}, "kiln", "/c", "/k",
                          pythonpath="/repo/python")
    assert env["CUPY_CACHE_DIR"] == "/c" and env["KILN_CACHE_DIR"] == "/k" and env["KEEP"] == "k"
    assert "KILN_CUPY" not in env and "KILN_RECORD" not in env
    assert env["PYTHONPATH"] == os.pathsep.join(["/repo/python", "/p"])
    assert bench.child_env({}, "kiln", "/c", "/k", record="/m.jsonl")["KILN_RECORD"] == "/m.jsonl"


def test_find_kiln_cli(bench, tmp_path):
    fake = tmp_path / "kiln"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert bench.find_kiln_cli(str(fake)) == str(fake)


def test_refuses_unsupported_cupy_with_exit_2(tmp_path):
    fake = tmp_path / "cupy"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '13.0.0'\n")
    result = subprocess.run([sys.executable, BENCH, "--quick"], env=subprocess_env(PYTHONPATH=str(tmp_path)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot run: CuPy 13.0.0 found; kiln.cupy supports 14.2.x" in result.stderr


def test_bad_arguments(bench):
    with pytest.raises(SystemExit) as caught:
        bench.main(["--parts", "4"])
    assert caught.value.code == 2


def test_part_timing_pairs(bench, tmp_path, capsys):
    """Part 2 over a stand-in runner: pairs in alternating order, each pair's sides printed with kiln's PCH counts."""
    seconds = {"cupy": iter([60.0, 70.0, 66.0]), "kiln": iter([30.0, 20.0, 24.0])}
    made = iter([7, 8, 7])

    class Runner:
        args = type("Args", (), {"warm": False, "after": None})()
        calls = []

        def fresh(self, what):
            return str(tmp_path / what)

        def run(self, mode, cupy_cache, kiln_cache, workload=None):
            assert workload is None
            self.calls.append(mode)
            out = tmp_path / f"out{len(self.calls)}"
            out.mkdir()
            (out / "00_x.npy").write_bytes(b"same")
            spent = next(seconds[mode])
            report = {"mode": mode, "calls": 100, "compile_seconds": spent, "workload_seconds": spent + 1.0,
                      "nvrtc_seconds": spent - 1.0, "out": str(out), "steps": []}
            if mode == "kiln":
                report["kiln"] = {"seconds": {"kiln": spent - 0.5}, "engine": {
                    "compile_nanoseconds": int((spent - 1.5) * 1e9), "pch_made": next(made), "pch_used": 84}}
            return report

    runner = Runner()
    assert bench.part_timing(runner, 3)
    assert runner.calls == ["cupy", "kiln", "kiln", "cupy", "cupy", "kiln"]
    text = capsys.readouterr().out
    assert "run by run (each pair moments apart): 0.500, 0.286, 0.364" in text
    assert "pair 1 (cupy first): cupy 60.00 s (NVRTC 59.00), kiln 30.00 s (NVRTC 28.50, PCH made 7 used 84)" in text
    assert "pair 2 (kiln first): cupy 70.00 s (NVRTC 69.00), kiln 20.00 s (NVRTC 18.50, PCH made 8 used 84)" in text
    assert "every run's outputs identical" in text


def test_part_timing_after(bench, tmp_path, capsys):
    """--after: each timed cold run follows one untimed run of the earlier workload, same mode, same caches."""
    class Runner:
        args = type("Args", (), {"warm": False, "after": "program"})()
        calls = []
        count = 0

        def fresh(self, what):
            Runner.count += 1
            return str(tmp_path / f"{Runner.count}-{what}")

        def run(self, mode, cupy_cache, kiln_cache, workload=None):
            self.calls.append((mode, workload, cupy_cache, kiln_cache))
            out = tmp_path / f"out{len(self.calls)}"
            out.mkdir()
            (out / "00_x.npy").write_bytes(b"same")
            return {"mode": mode, "calls": 10, "compile_seconds": 2.0 if mode == "cupy" else 0.5,
                    "workload_seconds": 3.0, "out": str(out), "steps": [], "kiln": {"engine": {}}}

    runner = Runner()
    assert bench.part_timing(runner, 2)
    assert [(mode, workload) for mode, workload, _, _ in runner.calls] == [
        ("cupy", "program"), ("cupy", None), ("kiln", "program"), ("kiln", None),
        ("kiln", "program"), ("kiln", None), ("cupy", "program"), ("cupy", None)]
    for first, timed in zip(runner.calls[::2], runner.calls[1::2]):
        assert first[2:] == timed[2:]  # the timed run finds what the earlier program left in its caches
    assert len({call[3] for call in runner.calls}) == 4  # and each pair of runs its own caches
    text = capsys.readouterr().out
    assert "each cold run's caches first filled by one run of `program`" in text
    assert "run by run (each pair moments apart): 0.250, 0.250" in text
