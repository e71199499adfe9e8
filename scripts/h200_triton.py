"""kiln.triton and kiln.torch on a machine with an NVIDIA GPU, torch 2.11 and Triton 3.6 (the H200/H100 round):
each check prints PASS or FAIL with what it saw (info lines report without judging); a compact summary ends the
output; the exit status is the number of failures.

  KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python python3 scripts/h200_triton.py \
      [--work DIR] [--kiln build/tools/kiln] [--triton-tests .carry/triton_tests] [--parts tests,compile,kernel]

(scripts/h200_run.sh with KILN_H200_ONLY=triton builds kiln and runs this.) Every measured run is a fresh
process; the script runs itself again as those processes (--child ...). Under ~6 minutes in all.

Parts:
 tests    Triton's own runtime cache tests (python/test/unit/runtime/test_cache.py, test_build.py and
          test_subproc.py with python/test/conftest.py and python/test/unit/conftest.py, from the Triton
          repository at the installed version's tag: scripts/fetch_triton_tests.sh puts them in
          .carry/triton_tests), run as shipped (Triton's FileCacheManager) and with
          TRITON_CACHE_MANAGER=kiln.triton:CacheManager: the outcome of every test must be the same.
 compile  torch.compile of a small MLP (Linear, LayerNorm, GELU, Linear, softmax: a few Inductor-generated Triton
          kernels), each run a fresh process with a fresh Inductor cache folder (its FX graph cache off, so each
          run goes to Triton for its kernels): Triton's cache cold and warm; kiln's cold and warm (warm: an empty
          hand-over folder, every kernel from kiln's cache); a "second node" with empty local caches and a pack
          the first kiln run filled (`kiln cache export`), imported (`kiln cache import`) and mounted
          (KILN_CACHE_PACKS). Outputs must be identical bit for bit across runs (autotuning off: a
          timing-dependent choice of configuration would change the bits with or without kiln); the warm and
          second-node kiln runs must compile nothing (no new group in kiln's cache). Time to first result (the
          first compiled call, synchronized) and the process's whole time, side by side.
 kernel   torch.cuda._compile_kernel through kiln.torch against torch's own: the same CUBIN (or PTX) and lowered
          name for an extern "C" kernel and a template with nvcc_options and cuda_include_dirs, kiln using the
          NVRTC torch loads (KILN_CUDA_PATH set to its folder); both launch and give the right result; the
          compile's time in a fresh process: torch's own (no cache), kiln cold, kiln warm (a disk hit).
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ElementTree

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MANAGER = "kiln.triton:CacheManager"
RESULTS = {"pass": 0, "fail": 0}
SUMMARY = []


def report(ok, what, detail=""):
    RESULTS["pass" if ok else "fail"] += 1
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        SUMMARY.append(f"FAIL {what}")
    return ok


def info(text):
    print(f"info {text}", flush=True)


# --- the children ----------------------------------------------------------------------------------------

def child_compile(out_path):
    """One torch.compile run (the MLP); its findings as JSON in out_path."""
    started = time.perf_counter()
    import torch
    import torch._inductor.config as config

    config.triton.autotune_pointwise = False  # one configuration per kernel: the same bits in every run
    config.coordinate_descent_tuning = False
    config.max_autotune = False
    if hasattr(config, "fx_graph_cache"):
        config.fx_graph_cache = False  # each run goes to Triton for its kernels (env set too)
    torch.manual_seed(0)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(256, 1024)
            self.norm = torch.nn.LayerNorm(1024)
            self.down = torch.nn.Linear(1024, 256)

        def forward(self, x):
            return torch.softmax(self.down(torch.nn.functional.gelu(self.norm(self.up(x)))), dim=-1)

    model = MLP().cuda().eval()
    x = torch.randn(128, 256, device="cuda")
    with torch.no_grad():
        eager = model(x)
        torch.cuda.synchronize()
        compiled = torch.compile(model)
        before = time.perf_counter()
        y = compiled(x)
        torch.cuda.synchronize()
        first = time.perf_counter() - before
        y2 = compiled(x)
        torch.cuda.synchronize()
    host = y.float().cpu().contiguous()
    try:
        data = host.numpy().tobytes()
    except Exception:  # a torch without numpy: the bits as integers
        data = repr(host.view(torch.int32).flatten().tolist()).encode()
    out = {"first_result_s": first, "import_and_setup_s": before - started, "sha256": hashlib.sha256(data).hexdigest(),
           "stable": bool(torch.equal(y, y2)), "max_abs_vs_eager": float((y - eager).abs().max()),
           "triton_cache_manager": os.environ.get("TRITON_CACHE_MANAGER"), "kiln": None}
    if os.environ.get("TRITON_CACHE_MANAGER") == MANAGER:
        import kiln.triton
        out["kiln"] = kiln.triton.stats()
    with open(out_path, "w") as file:
        json.dump(out, file)


KERNELS = {
    "add": ('extern "C" __global__ void add_tensors(const float* a, const float* b, float* c, int n) {\n'
            '  int i = threadIdx.x + blockIdx.x * blockDim.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n', "add_tensors"),
    "template": ('#include "kiln_h200_scale.h"\n'
                 "template <typename T> __global__ void scale(T* data, T factor, int n) {\n"
                 "  int i = threadIdx.x + blockIdx.x * blockDim.x;\n"
                 "  if (i < n) data[i] = data[i] * factor + T(KILN_OFFSET);\n}\n", "scale<int>"),
}


def _loaded_nvrtc():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            if "libnvrtc.so" in path and "builtins" not in path:
                return path
    return None


def child_kernel(mode, headers, out_path):
    """torch.cuda._compile_kernel of KERNELS in `mode` ("own": torch's NVRTC call; "kiln": through kiln.torch);
    its binaries, names, results and the first compile's time as JSON in out_path."""
    import torch
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:  # a machine without the toolkit: the pip wheel's headers, as both use
        try:
            import nvidia.cuda_runtime as runtime
            cpp_extension.CUDA_HOME = list(runtime.__path__)[0]
        except ImportError:
            pass
    out = {"mode": mode, "kernels": {}, "cuda_home": cpp_extension.CUDA_HOME}
    if mode == "kiln":
        import kiln.torch
        kiln.torch.enable()
    n = 1 << 12
    for label, (source, name) in KERNELS.items():
        kwargs = {}
        if label == "template":
            kwargs = {"cuda_include_dirs": [headers], "nvcc_options": ["-std=c++17", "-DKILN_EXTRA=1"]}
        started = time.perf_counter()
        kernel = torch.cuda._compile_kernel(source, name, **kwargs)
        seconds = time.perf_counter() - started
        # What _compile_kernel loaded (by keyword: the same call for either form of torch's function).
        binary, lowered = torch.cuda._utils._nvrtc_compile(
            source, name, cuda_include_dirs=kwargs.get("cuda_include_dirs"), nvcc_options=kwargs.get("nvcc_options"))
        if label == "add":
            a, b = torch.arange(n, device="cuda", dtype=torch.float32), torch.ones(n, device="cuda")
            c = torch.empty_like(a)
            kernel(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[a, b, c, n])
            right = bool(torch.equal(c, a + 1))
        else:
            data = torch.arange(n, device="cuda", dtype=torch.int32)
            expected = data * 2 + 3
            kernel(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[data, 2, n])  # ints pass as C ints
            right = bool(torch.equal(data, expected))
        torch.cuda.synchronize()
        out["kernels"][label] = {"sha256": hashlib.sha256(binary).hexdigest(), "size": len(binary),
                                 "starts": binary[:4].hex(), "lowered": lowered, "seconds": seconds,
                                 "right": right}
    out["nvrtc"] = _loaded_nvrtc()
    if mode == "kiln":
        import kiln.torch
        stats = kiln.torch.stats()
        out["routed"], out["fallbacks"] = stats["routed"], stats["fallbacks"]
    with open(out_path, "w") as file:
        json.dump(out, file)


# --- the parent ------------------------------------------------------------------------------------------

def run_child(args, env, timeout):
    """(wall seconds, CompletedProcess) of this script as a child."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], env=env,
                            capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - started, result


def base_env(**changes):
    env = dict(os.environ)
    for name in ("TRITON_CACHE_MANAGER", "KILN_CACHE_PACKS", "KILN_REMOTE_CACHE", "KILN_TRITON_DIR", "KILN_TORCH",
                 "KILN_CUPY", "KILN_CUDA_CORE"):
        env.pop(name, None)
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"})
    if env.get("PYTHONPATH"):  # absolute: the children run in other folders (Triton's tests in theirs)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    if env.get("KILN_LIBRARY"):
        env["KILN_LIBRARY"] = os.path.abspath(env["KILN_LIBRARY"])
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def kiln_cli(args, argv, **env):
    return subprocess.run([args.kiln, *argv], env=base_env(**env), capture_output=True, text=True, timeout=120)


def junit_outcomes(path):
    """{test id: outcome} from pytest's JUnit XML."""
    outcomes = {}
    try:
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError):
        return outcomes
    for case in tree.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = child.tag
            elif child.tag == "skipped":
                outcome = "xfailed" if (child.get("type") or "").endswith("xfail") else "skipped"
        outcomes[name] = outcome
    return outcomes


def part_tests(args, work):
    print("== Triton's own runtime cache tests, as shipped and through kiln.triton", flush=True)
    unit = os.path.join(args.triton_tests, "python", "test", "unit")
    files = [os.path.join("runtime", name) for name in ("test_cache.py", "test_build.py", "test_subproc.py")
             if os.path.exists(os.path.join(unit, "runtime", name))]
    if not files:
        report(False, "Triton's tests", f"none under {unit} (scripts/fetch_triton_tests.sh)")
        return
    info(f"files: {', '.join(files)} (from {args.triton_tests})")
    runs = {}
    for mode in ("plain", "kiln"):
        folder = os.path.join(work, f"tests-{mode}")
        os.makedirs(folder)
        env = base_env(TRITON_CACHE_DIR=os.path.join(folder, "triton"), KILN_CACHE_DIR=os.path.join(folder, "kiln"),
                       TRITON_CACHE_MANAGER=MANAGER if mode == "kiln" else None)
        xml = os.path.join(folder, "junit.xml")
        started = time.perf_counter()
        try:
            command = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
            result = subprocess.run(command + (["-x"] if args.fail_fast else []), cwd=unit, env=env,
                                    capture_output=True, text=True, timeout=args.tests_timeout)
            tail = result.stdout.strip().splitlines()[-1:] or [result.stderr.strip()[-300:]]
        except subprocess.TimeoutExpired:
            tail = [f"cut at {args.tests_timeout} s"]
        runs[mode] = junit_outcomes(xml)
        counts = {}
        for outcome in runs[mode].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        info(f"{mode}: {tail[0]} ({time.perf_counter() - started:.1f} s; {counts})")
        if mode == "kiln":
            listed = kiln_cli(args, ["cache", "stats"], KILN_CACHE_DIR=os.path.join(folder, "kiln"))
            groups = [" ".join(line.split()) for line in listed.stdout.splitlines() if "blob triton" in line]
            report(bool(groups), "kiln's manager kept the tests' Triton files (kiln cache stats)", "; ".join(groups))
    plain, kiln = runs["plain"], runs["kiln"]
    differ = sorted(name for name in set(plain) | set(kiln) if plain.get(name) != kiln.get(name))
    failing = sorted(name.rsplit("::", 1)[-1] for name, outcome in plain.items() if outcome in ("failure", "error"))
    if failing:
        info(f"failing as shipped too: {failing[:12]}")
    ok = bool(plain) and not differ
    report(ok, "Triton's runtime cache tests: the same outcome, test by test, with kiln's manager",
           f"{len(plain)} tests" if ok else f"differ: {[(n, plain.get(n), kiln.get(n)) for n in differ[:8]]}")
    SUMMARY.append(f"triton tests: {len(plain)} run, as shipped {sorted(set(plain.values()))} "
                   f"{sum(v == 'passed' for v in plain.values())} passed; with kiln "
                   f"{sum(v == 'passed' for v in kiln.values())} passed; differing {len(differ)}")


def part_compile(args, work):
    print("== torch.compile of an MLP (Linear, LayerNorm, GELU, Linear, softmax), fresh processes", flush=True)
    folder = os.path.join(work, "compile")
    os.makedirs(folder)
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    pack = path("triton.kpack")
    rows = []

    def groups(cache):
        listed = kiln_cli(args, ["cache", "ls", "--json"], KILN_CACHE_DIR=cache)
        try:
            return sum(1 for item in json.loads(listed.stdout) if item.get("labels", {}).get("kernel"))
        except ValueError:
            return None

    def triton_groups(folder):
        """Kernels in a Triton cache folder (its key folders holding a group file)."""
        return sum(1 for key in (os.listdir(folder) if os.path.isdir(folder) else ())
                   if any(name.startswith("__grp__") for name in os.listdir(os.path.join(folder, key))))

    def run(label, **env):
        out = path(f"{label}.json")
        env = base_env(TORCHINDUCTOR_CACHE_DIR=path(f"inductor-{label}"), **env)
        try:
            wall, result = run_child(["compile", out], env, args.compile_timeout)
        except subprocess.TimeoutExpired:
            report(False, f"torch.compile run {label}", f"cut at {args.compile_timeout} s")
            return None
        if result.returncode != 0 or not os.path.exists(out):
            report(False, f"torch.compile run {label}", (result.stderr or result.stdout)[-800:])
            return None
        with open(out) as file:
            found = json.load(file)
        found["wall_s"] = wall
        rows.append((label, found))
        return found

    cold = run("triton-cold", TRITON_CACHE_DIR=path("triton-a"))
    triton_cold = triton_groups(path("triton-a"))
    warm = run("triton-warm", TRITON_CACHE_DIR=path("triton-a"))
    report(triton_cold > 0 and triton_groups(path("triton-a")) == triton_cold,
           "Triton's own cache: the warm run compiled nothing (no new kernel folder)", f"{triton_cold} kernels")
    kiln_cache = path("kiln-a")
    kcold = run("kiln-cold", TRITON_CACHE_MANAGER=MANAGER, KILN_CACHE_DIR=kiln_cache, TRITON_CACHE_DIR=path("hand-1"))
    stored = groups(kiln_cache)
    kwarm = run("kiln-warm", TRITON_CACHE_MANAGER=MANAGER, KILN_CACHE_DIR=kiln_cache, TRITON_CACHE_DIR=path("hand-2"))
    after_warm = groups(kiln_cache)
    exported = kiln_cli(args, ["cache", "export", pack], KILN_CACHE_DIR=kiln_cache)
    report(exported.returncode == 0, "kiln cache export of the first kiln run", exported.stderr.strip()[-200:])
    imported = kiln_cli(args, ["cache", "import", pack], KILN_CACHE_DIR=path("kiln-node-b"))
    report(imported.returncode == 0, "kiln cache import on the second node", imported.stderr.strip()[-200:])
    node_b = run("node-b-imported", TRITON_CACHE_MANAGER=MANAGER, KILN_CACHE_DIR=path("kiln-node-b"),
                 TRITON_CACHE_DIR=path("hand-3"))
    after_b = groups(path("kiln-node-b"))
    node_c = run("node-c-mounted", TRITON_CACHE_MANAGER=MANAGER, KILN_CACHE_DIR=path("kiln-node-c"),
                 KILN_CACHE_PACKS=pack, TRITON_CACHE_DIR=path("hand-4"))
    after_c = groups(path("kiln-node-c"))
    info(f"Triton groups in kiln's cache: after the cold run {stored}, after the warm run {after_warm}; "
         f"on the second node after its run {after_b} (imported pack), {after_c} (mounted pack, copied in on use)")
    shas = {label: found["sha256"] for label, found in rows}
    report(len(rows) == 6 and len(set(shas.values())) == 1, "outputs identical bit for bit in every run",
           json.dumps(shas) if len(set(shas.values())) != 1 else f"sha256 {next(iter(shas.values()))[:16]}")
    for label, found in rows:
        info(f"{label}: max |compiled - eager| {found['max_abs_vs_eager']:.3g}, second call equal {found['stable']}")
    if stored is not None:
        report(bool(stored) and after_warm == stored, "kiln warm run compiled nothing (no new group)",
               f"{stored} groups")
        report(bool(stored) and after_b == stored, "second node (imported pack) compiled nothing", f"{after_b} groups")
        report(bool(stored) and after_c == stored, "second node (mounted pack) compiled nothing", f"{after_c} groups")
    for label, found in (("kiln-warm", kwarm), ("node-b-imported", node_b), ("node-c-mounted", node_c)):
        if found and found.get("kiln"):
            info(f"{label}: kiln.triton in the main process: groups {found['kiln']['groups']}, files "
                 f"{found['kiln']['files']['hits']}, handed over {found['kiln']['handed_over']}")
    print(f"{'run':<18}{'first result s':>16}{'process s':>12}", flush=True)
    for label, found in rows:
        print(f"{label:<18}{found['first_result_s']:>16.2f}{found['wall_s']:>12.2f}", flush=True)
    cells = ", ".join(f"{label} {found['first_result_s']:.2f}/{found['wall_s']:.1f}" for label, found in rows)
    SUMMARY.append(f"torch.compile MLP, first result / process s: {cells}")
    del cold, warm, kcold, node_b, node_c


def part_kernel(args, work):
    print("== torch.cuda._compile_kernel: torch's own and through kiln.torch, fresh processes", flush=True)
    folder = os.path.join(work, "kernel")
    headers = os.path.join(folder, "headers")
    os.makedirs(headers)
    with open(os.path.join(headers, "kiln_h200_scale.h"), "w") as file:
        file.write("#define KILN_OFFSET 3\n")
    results = {}
    env = base_env(KILN_CACHE_DIR=os.path.join(folder, "kiln"))
    wall, own = run_child(["kernel", "own", headers, os.path.join(folder, "own.json")], env, 120)
    if own.returncode != 0:
        report(False, "torch's own _compile_kernel", own.stderr[-800:])
        return
    with open(os.path.join(folder, "own.json")) as file:
        results["own"] = json.load(file)
    nvrtc = results["own"]["nvrtc"]
    info(f"torch loads NVRTC from {nvrtc}; CUDA_HOME {results['own']['cuda_home']}")
    nvrtc_dir = os.path.dirname(os.path.dirname(nvrtc)) if nvrtc else None
    if nvrtc_dir and os.path.basename(os.path.dirname(nvrtc)) in ("lib", "lib64"):
        env["KILN_CUDA_PATH"] = nvrtc_dir  # kiln compiles with the very NVRTC torch uses
    for mode in ("kiln-cold", "kiln-warm"):
        out = os.path.join(folder, f"{mode}.json")
        wall, result = run_child(["kernel", "kiln", headers, out], env, 120)
        if result.returncode != 0:
            report(False, f"_compile_kernel through kiln ({mode})", result.stderr[-800:])
            return
        with open(out) as file:
            results[mode] = json.load(file)
    for label in KERNELS:
        own_k, cold_k, warm_k = (results[m]["kernels"][label] for m in ("own", "kiln-cold", "kiln-warm"))
        same = own_k["sha256"] == cold_k["sha256"] == warm_k["sha256"] and own_k["lowered"] == cold_k["lowered"]
        report(same, f"{label}: kiln's binary and lowered name are torch's own",
               f"{own_k['size']} bytes, starts {own_k['starts']}, {own_k['lowered']}" if same else
               json.dumps({m: results[m]["kernels"][label] for m in results}))
        report(own_k["right"] and cold_k["right"] and warm_k["right"], f"{label}: the launched kernel's result")
    # (each child asks _nvrtc_compile again after _compile_kernel: in kiln's runs a memory hit)
    cold_r, warm_r = results["kiln-cold"]["routed"], results["kiln-warm"]["routed"]
    report(cold_r.get("compiled") == 2 and warm_r.get("disk") == 2 and "compiled" not in warm_r
           and not results["kiln-cold"]["fallbacks"] and not results["kiln-warm"]["fallbacks"],
           "kiln.torch served both: compiled cold, disk hits warm",
           f"cold {results['kiln-cold']['routed']}, warm {results['kiln-warm']['routed']}, fallbacks "
           f"{results['kiln-warm']['fallbacks']}")
    times = {m: {label: results[m]["kernels"][label]["seconds"] * 1000 for label in KERNELS} for m in results}
    print(f"{'_compile_kernel ms':<20}" + "".join(f"{label:>12}" for label in KERNELS), flush=True)
    for mode, row in times.items():
        print(f"{mode:<20}" + "".join(f"{row[label]:>12.2f}" for label in KERNELS), flush=True)
    SUMMARY.append("_compile_kernel ms (add, template): " + ", ".join(
        f"{mode} {row['add']:.1f}/{row['template']:.1f}" for mode, row in times.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None)
    parser.add_argument("--kiln", default=os.environ.get("KILN_CLI") or shutil.which("kiln") or "kiln")
    parser.add_argument("--triton-tests", default=os.path.join(REPO, ".carry", "triton_tests"))
    parser.add_argument("--parts", default="tests,compile,kernel")
    parser.add_argument("--tests-timeout", type=int, default=110, help="seconds for each run of Triton's tests")
    parser.add_argument("--compile-timeout", type=int, default=120, help="seconds for each torch.compile run")
    parser.add_argument("--fail-fast", action="store_true")
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "compile":
            child_compile(*rest)
        else:
            child_kernel(*rest)
        return 0
    work = args.work or tempfile.mkdtemp(prefix="kiln-h200-triton-")
    os.makedirs(work, exist_ok=True)
    started = time.perf_counter()
    import torch
    import triton

    import kiln
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    info(f"torch {torch.__version__}, Triton {triton.__version__}, device {device}, "
         f"kiln {kiln.__version__} ({kiln.library_path}, API {kiln.api_version()}), kiln CLI {args.kiln}, work {work}")
    parts = {"tests": part_tests, "compile": part_compile, "kernel": part_kernel}
    for name in args.parts.split(","):
        try:
            parts[name](args, work)
        except Exception as error:  # one part's trouble does not stop the others
            report(False, f"part {name}", f"{type(error).__name__}: {error}")
    print(f"== summary ({time.perf_counter() - started:.0f} s; torch {torch.__version__}, Triton "
          f"{triton.__version__}, {device})", flush=True)
    for line in SUMMARY:
        print(f"  {line}", flush=True)
    print(f"  {RESULTS['pass']} passed, {RESULTS['fail']} failed", flush=True)
    return RESULTS["fail"]


if __name__ == "__main__":
    sys.exit(main())
