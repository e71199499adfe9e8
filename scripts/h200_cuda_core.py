"""kiln.cuda_core against the real cuda.core, on a machine with a GPU (the H200 round): each check prints
PASS or FAIL with what it saw; the exit status is the number of failures.

  KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python python3 scripts/h200_cuda_core.py

What it checks: the version and the parts kiln.cuda_core relies on; a template kernel with name
expressions compiled with kiln and with cuda.core alone (the same bytes, the same symbol mapping, a
launch that computes the right values); PTX likewise; a compile error's type and message against cuda.core's
own; include_path keyed by content across fresh processes (an edit recompiles); cache= and ltoir left to
cuda.core; a matrix of ProgramOptions compiled both ways (served or fallen back, and the same bytes
when served)."""

import inspect
import os
import subprocess
import sys
import tempfile
import textwrap

failures = 0


def check(ok, what, detail=""):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'}  {what}{': ' + str(detail) if detail else ''}", flush=True)


import cuda.core as core  # noqa: E402

import kiln  # noqa: E402
import kiln.cuda_core  # noqa: E402

print("cuda.core", core.__version__, "compile", inspect.signature(core.Program.compile))
from cuda.core._utils.cuda_utils import NVRTCError  # noqa: E402

dev = core.Device()
dev.set_current()
arch = "sm_" + "".join(str(x) for x in dev.compute_capability)
TEMPLATE = textwrap.dedent("""\
    template <typename T> __global__ void scale(T* out, T factor, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = out[i] * factor + T(i);
    }
    extern "C" __global__ void plain(int* out) { out[threadIdx.x] = threadIdx.x * 3; }
""")
NAMES = ("scale<float>", "scale<double>")


def both(make_options, target, code=TEMPLATE, names=NAMES):
    """(kiln's ObjectCode, cuda.core's, kiln.cuda_core.stats() after kiln's compile)."""
    kiln.cuda_core.enable()
    kiln.cuda_core.reset_stats()
    with_kiln = core.Program(code, "c++", make_options()).compile(target, name_expressions=names)
    stats = kiln.cuda_core.stats()
    kiln.cuda_core.disable()
    alone = core.Program(code, "c++", make_options()).compile(target, name_expressions=names)
    return with_kiln, alone, stats


# 1. cubin with name expressions, launched.
k, c, stats = both(lambda: core.ProgramOptions(arch=arch, std="c++17"), "cubin")
check(stats["routed"].get("compiled", 0) + stats["routed"].get("disk", 0) == 1, "cubin served by kiln", stats["routed"])
check(bytes(k.code) == bytes(c.code), "cubin bytes identical to cuda.core's", f"{len(k.code)} vs {len(c.code)}")
check(k.symbol_mapping == c.symbol_mapping, "symbol mapping identical", k.symbol_mapping)
check(k.name == c.name and k.code_type == c.code_type, "name and code type", (k.name, k.code_type))
try:
    import cupy

    out = cupy.ones(256, dtype=cupy.float32)
    kernel = k.get_kernel("scale<float>")
    stream = dev.create_stream()
    import numpy

    # cuda.core takes a Python int as a pointer, numpy scalars as values.
    core.launch(stream, core.LaunchConfig(grid=1, block=256), kernel, out.data.ptr, numpy.float32(2.0),
                numpy.int32(256))
    stream.sync()
    expect = cupy.arange(256, dtype=cupy.float32) + 2
    check(bool((out == expect).all()), "scale<float> from kiln's ObjectCode computes out*2+i")
except Exception as error:  # noqa: BLE001
    check(False, "launch of kiln's kernel", repr(error))

# 2. PTX.
k, c, stats = both(lambda: core.ProgramOptions(arch=arch), "ptx")
check(sum(stats["routed"].values()) == 1, "ptx served by kiln", stats["routed"])
check(bytes(k.code).endswith(b"\0") and not bytes(k.code).endswith(b"\0\0"), "ptx ends with one NUL")
check(bytes(k.code) == bytes(c.code), "ptx identical to cuda.core's", f"{len(k.code)} vs {len(c.code)}")
try:
    k.get_kernel("plain")
    check(True, "ptx loads (get_kernel)")
except Exception as error:  # noqa: BLE001
    check(False, "ptx loads (get_kernel)", repr(error))

# 3. A compile error.
messages = []
for on in (True, False):
    (kiln.cuda_core.enable if on else kiln.cuda_core.disable)()
    try:
        core.Program("__global__ void broken( {", "c++", core.ProgramOptions(arch=arch)).compile("cubin")
        messages.append(None)
    except NVRTCError as error:
        messages.append(str(error).split("\n", 1)[0])
    except Exception as error:  # noqa: BLE001
        messages.append(f"other: {type(error).__name__}: {error}")
check(messages[0] == messages[1] and messages[0] is not None, "compile error: NVRTCError, first line as cuda.core's",
      messages)

# 4. include_path keyed by content, across fresh processes.
work = tempfile.mkdtemp(prefix="kiln-cuda-core-")
os.makedirs(f"{work}/inc")
with open(f"{work}/inc/value.h", "w") as f:
    f.write("#define VALUE 7\n")
child = textwrap.dedent(f"""\
    import kiln, kiln.cuda_core, cuda.core as core
    kiln.cuda_core.enable()
    core.Device().set_current()
    p = core.Program('#include <value.h>\\nextern "C" __global__ void v(int* o) {{ *o = VALUE; }}\\n', "c++",
                     core.ProgramOptions(arch="{arch}", include_path=["{work}/inc"]))
    p.compile("cubin")
    print(dict(kiln.cuda_core.stats()["routed"]))
""")
env = dict(os.environ, KILN_CACHE_DIR=f"{work}/cache")
runs = []
for step in ("first", "again", "edited"):
    if step == "edited":
        with open(f"{work}/inc/value.h", "w") as f:
            f.write("#define VALUE 8\n")
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
    runs.append(done.stdout.strip() or done.stderr.strip()[-300:])
check(runs == ["{'compiled': 1}", "{'disk': 1}", "{'compiled': 1}"], "include_path: compiled, disk hit, edit recompiles",
      runs)

# 5. What stays with cuda.core.
kiln.cuda_core.enable()
kiln.cuda_core.reset_stats()
try:
    from cuda.core.utils import InMemoryProgramCache

    core.Program(TEMPLATE, "c++", core.ProgramOptions(arch=arch)).compile("cubin", cache=InMemoryProgramCache())
    check(sum(kiln.cuda_core.stats()["fallbacks"].values()) == 1, "cache= left to cuda.core",
          kiln.cuda_core.stats()["fallbacks"])
except ImportError as error:
    print("skip  cache=:", error)
k, c, stats = both(lambda: core.ProgramOptions(arch=arch, link_time_optimization=True), "ltoir")
if stats["routed"]:
    check(bytes(k.code) == bytes(c.code) and k.symbol_mapping == c.symbol_mapping,
          "ltoir served by kiln, byte-identical to cuda.core's", f"{len(k.code)} vs {len(c.code)}")
else:
    print(f"info  ltoir left to cuda.core: {stats['fallbacks']}")
kiln.cuda_core.enable()

# 6. A matrix of options, both ways.
matrix = [dict(name="abc"), dict(debug=True), dict(lineinfo=True), dict(ftz=True, prec_sqrt=False, prec_div=False),
          dict(fma=False, use_fast_math=True), dict(max_register_count=32), dict(define_macro="MY_MACRO"),
          dict(define_macro=[("MY_MACRO", "99"), ("OTHER", "100")]), dict(undefine_macro=["MY_MACRO"]),
          dict(restrict=True), dict(device_int128=True), dict(disable_warnings=True), dict(std="c++20"),
          dict(relocatable_device_code=True), dict(extra_device_vectorization=True), dict(link_time_optimization=True)]
served = fell = same = 0
for extra in matrix:
    for target in ("ptx", "cubin"):
        try:
            k, c, stats = both(lambda: core.ProgramOptions(arch=arch, **extra), target, TEMPLATE, NAMES)
        except Exception as error:  # noqa: BLE001
            print(f"info  {extra} {target}: {type(error).__name__}: {str(error)[:120]}")
            continue
        if stats["routed"]:
            served += 1
            ok = bytes(k.code) == bytes(c.code) and k.symbol_mapping == c.symbol_mapping
            same += ok
            if not ok:
                print(f"FAIL  {extra} {target}: kiln's bytes differ from cuda.core's")
                failures += 1
        else:
            fell += 1
            print(f"info  {extra} {target}: left to cuda.core: {stats['fallbacks']}")
check(same == served, f"option matrix: {served} served by kiln (identical bytes: {same}), {fell} left to cuda.core")
print(f"{failures} failure(s)")
sys.exit(failures)
