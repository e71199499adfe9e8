"""kiln.cuda_core.ProgramCache against the real cuda.core on a machine with a GPU (the H200 round): each
check prints PASS or FAIL with what it saw (info lines say what was found without judging it); the exit
status is the number of failures.

  KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python python3 scripts/h200_program_cache.py [WORKDIR]

(WORKDIR, default a fresh temp folder, receives the cache folders; the script runs itself again as child
processes, one compile each, so every compile after the first is in a fresh process.)

What it checks:
 1. cuda.core's ProgramCacheResource: its abstract methods (printed), and that ProgramCache is one.
 2. Routed (kiln.cuda_core enabled): Program(...).compile("cubin", name_expressions=[...],
    cache=ProgramCache(dir)) in two fresh processes: the first a miss (kiln compiled), the second a hit
    (the counters printed); both byte-identical to cuda.core's own compile without a cache, with the same
    symbol_mapping; get_kernel(name_expression) works on each result.
 3. cuda.core's own cache path (kiln.cuda_core not enabled): compile("cubin", cache=ProgramCache(dir))
    twice in fresh processes: a miss that stores, then a hit through get(); the bytes are cuda.core's own;
    what cuda.core hands __setitem__ and gets back is printed; get_object_code() keeps the name.
    Whether cuda.core refuses name_expressions with cache= is printed (info).
 4. The entries in `kiln cache ls` (KIND blob) when the kiln CLI is found next to KILN_LIBRARY.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import traceback

TEMPLATE = textwrap.dedent("""\
    template <typename T> __global__ void pc_scale(T* out, T factor, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = out[i] * factor + T(i);
    }
    extern "C" __global__ void pc_plain(int* out) { out[threadIdx.x] = threadIdx.x * 5; }
""")
NAMES = ["pc_scale<float>", "pc_scale<double>"]


# --- the child: one compile in a fresh process, its findings as one JSON line -----------------------

def child(mode, folder):
    out = {"mode": mode}
    try:
        import cuda.core as core

        import kiln
        import kiln.cuda_core

        device = core.Device()
        device.set_current()
        arch = "sm_" + "".join(str(x) for x in device.compute_capability)
        options = core.ProgramOptions(arch=arch, name="pc.cu")
        if mode == "reference":  # cuda.core alone, no cache
            result = core.Program(TEMPLATE, "c++", options).compile("cubin", name_expressions=NAMES)
            plain = core.Program(TEMPLATE, "c++", core.ProgramOptions(arch=arch, name="pc.cu")).compile("cubin")
            out["plain_code"] = bytes(plain.code).hex()
        elif mode == "routed":
            kiln.cuda_core.enable()
            cache = kiln.cuda_core.ProgramCache(folder)
            result = core.Program(TEMPLATE, "c++", options).compile("cubin", name_expressions=NAMES, cache=cache)
            out["stats"] = cache.stats()
            out["routing"] = {key: kiln.cuda_core.stats()[key] for key in ("routed", "fallbacks")}
        else:  # "plain": cuda.core's own Program.compile(cache=...) over the kiln ProgramCache
            seen = {"set": [], "get": []}
            base = kiln.cuda_core.ProgramCache

            class Recording(base):
                def __setitem__(self, key, value):
                    seen["set"].append(type(value).__name__)
                    return super().__setitem__(key, value)

                def get(self, key, default=None):
                    found = super().get(key, default)
                    seen["get"].append(type(found).__name__)
                    return found

            cache = Recording(folder)
            result = core.Program(TEMPLATE, "c++", options).compile("cubin", cache=cache)
            out["stats"] = cache.stats()
            out["seen"] = seen
            out["entries"] = len(cache)
            try:
                from cuda.core.utils import make_program_cache_key
                key = make_program_cache_key(code=TEMPLATE, code_type="c++", options=options, target_type="cubin")
                rebuilt = cache.get_object_code(key, code_type="cubin")
                out["rebuilt_name"] = None if rebuilt is None else rebuilt.name
            except Exception as error:  # noqa: BLE001 (reported, not judged here)
                out["rebuilt_name"] = f"error: {type(error).__name__}: {error}"
            try:
                core.Program(TEMPLATE, "c++", options).compile("cubin", name_expressions=NAMES, cache=cache)
                out["names_with_cache"] = "accepted"
            except ValueError as error:
                out["names_with_cache"] = f"ValueError: {error}"
        out["code"] = bytes(result.code).hex()
        out["name"] = result.name
        out["code_type"] = result.code_type
        out["mapping"] = {str(k): bytes(v).decode() for k, v in (result.symbol_mapping or {}).items()}
        kernels = {}
        for name in (NAMES if out["mapping"] else []) + ["pc_plain"]:
            try:
                result.get_kernel(name)
                kernels[name] = "ok"
            except Exception as error:  # noqa: BLE001
                kernels[name] = f"{type(error).__name__}: {error}"
        out["kernels"] = kernels
    except Exception as error:  # noqa: BLE001 (the parent prints it as a FAIL)
        out["error"] = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    print(json.dumps(out))


# --- the parent ------------------------------------------------------------------------------------

failures = 0


def check(ok, what, detail=""):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'}  {what}{': ' + str(detail) if detail != '' else ''}", flush=True)


def run(mode, folder):
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, folder], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, KILN_CUDA_CORE="0"))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"mode": mode, "error": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    found = json.loads(lines[-1])
    if "error" in found:
        print(f"info  {mode} child: {found['error']}")
    return found


def counters(found):
    stats = found.get("stats") or {}
    return {key: stats.get(key) for key in ("hits", "misses", "get_hits", "get_misses", "routed_hits", "routed_misses",
                                            "stores", "not_stored", "undecodable", "corrupt_removed", "evictions")}


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kiln-program-cache-")
    os.makedirs(work, exist_ok=True)
    print("work folder", work)

    # 1. The base class, as this cuda.core has it.
    import inspect

    import cuda.core as core

    import kiln
    import kiln.cuda_core

    print("cuda.core", core.__version__, "compile", inspect.signature(core.Program.compile))
    print("kiln API", kiln.api_version(), kiln.library_path)
    try:
        from cuda.core.utils import ProgramCacheResource
        print("info  ProgramCacheResource.__abstractmethods__ =", sorted(ProgramCacheResource.__abstractmethods__))
        print("info  ProgramCacheResource has", sorted(n for n in ("get", "update", "close", "__contains__",
                                                                   "__enter__", "__exit__")
                                                       if hasattr(ProgramCacheResource, n)))
    except ImportError as error:
        ProgramCacheResource = None
        print("info  no cuda.core.utils.ProgramCacheResource:", error)
    try:
        cls = kiln.cuda_core.ProgramCache
        with cls(os.path.join(work, "probe")) as probe:
            check(ProgramCacheResource is None or isinstance(probe, ProgramCacheResource),
                  "ProgramCache is a cuda.core ProgramCacheResource", [c.__name__ for c in type(probe).__mro__])
    except kiln.Error as error:
        check(False, "ProgramCache can be made over this cuda.core", error)
        return

    reference = run("reference", "")
    check("error" not in reference, "cuda.core's own compile (the reference)")

    # 2. Routed: two fresh processes on one cache folder.
    routed = os.path.join(work, "routed")
    first, second = run("routed", routed), run("routed", routed)
    for label, found in (("first", first), ("second", second)):
        print(f"info  routed {label}: counters {counters(found)}; kiln.cuda_core {found.get('routing')}")
    check(first.get("stats", {}).get("routed_misses") == 1 and first.get("stats", {}).get("hits") == 0,
          "routed, first process: a miss (kiln compiled)", counters(first))
    check(second.get("stats", {}).get("routed_hits") == 1 and second.get("stats", {}).get("misses") == 0,
          "routed, second process: a hit", counters(second))
    check(first.get("code") is not None and first.get("code") == second.get("code") == reference.get("code"),
          "routed cubin identical to cuda.core's own (both processes)",
          f"{len(first.get('code') or '') // 2} / {len(second.get('code') or '') // 2} / "
          f"{len(reference.get('code') or '') // 2} bytes")
    check(first.get("mapping") == second.get("mapping") == reference.get("mapping") and bool(reference.get("mapping")),
          "symbol_mapping identical to cuda.core's, on the hit too", second.get("mapping"))
    check(all(v == "ok" for v in (second.get("kernels") or {"none": "missing"}).values()),
          "get_kernel(name_expression) on the hit's ObjectCode", second.get("kernels"))
    check(second.get("name") == reference.get("name") and second.get("code_type") == "cubin",
          "name and code type", (second.get("name"), second.get("code_type")))

    # 3. cuda.core's own cache path over the ProgramCache.
    plain = os.path.join(work, "plain")
    first, second = run("plain", plain), run("plain", plain)
    for label, found in (("first", first), ("second", second)):
        print(f"info  plain {label}: counters {counters(found)}; cuda.core set {found.get('seen', {}).get('set')} "
              f"get {found.get('seen', {}).get('get')}; entries {found.get('entries')}")
    check(first.get("stats", {}).get("get_misses", 0) >= 1 and first.get("stats", {}).get("stores", 0) >= 1,
          "cuda.core's path, first process: a miss, stored", counters(first))
    check(second.get("stats", {}).get("get_hits") == 1 and second.get("stats", {}).get("stores") == 0,
          "cuda.core's path, second process: a hit through get()", counters(second))
    check(first.get("code") is not None and first.get("code") == second.get("code") == reference.get("plain_code"),
          "cuda.core's path: the hit's bytes are cuda.core's own compile's")
    check(second.get("rebuilt_name") == "pc.cu", "get_object_code keeps the ObjectCode's name",
          second.get("rebuilt_name"))
    check(second.get("kernels", {}).get("pc_plain") == "ok", "get_kernel on the hit's ObjectCode",
          second.get("kernels"))
    print(f"info  cuda.core with name_expressions and cache=: {second.get('names_with_cache')}")

    # 4. The CLI sees the entries.
    library = os.environ.get("KILN_LIBRARY", "")
    cli = os.path.join(os.path.dirname(os.path.dirname(library)), "tools", "kiln") if library else ""
    if cli and os.path.isfile(cli):
        listing = subprocess.run([cli, "cache", "ls", "--cache-dir", plain], capture_output=True, text=True)
        check(" blob " in listing.stdout and "namespace cuda.core" in listing.stdout,
              "kiln cache ls shows the entries as KIND blob, namespace cuda.core", listing.stdout.strip()[-400:])
    else:
        print(f"info  no kiln CLI at {cli!r}: `kiln cache ls` not checked")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    main()
    print(f"{failures} failure(s)")
    sys.exit(failures)
