#!/usr/bin/env python3
"""The kiln wheel, built from this build tree and used with nothing of that tree in reach.

    wheel_test.py --source-dir REPO --build-dir BUILD

1. scripts/build_wheel.sh makes the wheel (the build as it is: KILN_WHEEL_NO_BUILD=1).
2. The file itself: its name and tag, every module of python/kiln, libkiln and the CLI (executable),
   true metadata (the version of python/kiln/VERSION, Requires-Python, a summary), the `kiln` command.
3. A copy of it goes to a fresh temporary folder, outside the source and build trees, where a venv
   made without pip (`python3 -m venv --without-pip`) gets it through `pip --python`.
4. From there, in an environment with no KILN_LIBRARY, PYTHONPATH or LD_LIBRARY_PATH and the temporary
   folder as the working directory: `import kiln` loads the venv's libkiln (kiln.library_path), which
   compiles a kernel for sm_90 and for gfx90a, `import kiln.cupy` (no CuPy here), kiln.cuda_core,
   kiln.torch and kiln.triton import cleanly (importing neither torch nor Triton), and no file of the
   source or build tree is mapped into the process; the venv's `kiln --version` and `kiln devices` run;
   every library the two binaries load, but the C and C++ runtime, comes from the venv, and their run
   paths are all relative ($ORIGIN).

A target is checked when the build tree's own libkiln can compile for it here (a machine without
NVRTC or HIPRTC cannot do it either way); exit status 77 (skipped) when it can do neither, or when
this Python lacks venv, pip 22.3+ (--python), setuptools or wheel.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SKIP = 77
SYSTEM_LIBRARY = re.compile(r"^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libutil|libresolv|"
                            r"libstdc\+\+|libgcc_s)\.so")

# Run by the venv's Python (and, for reference, with the build tree's libkiln): JSON on stdout.
PROBE = r"""
import json, sys
import kiln
import kiln.cuda_core
import kiln.cupy
import kiln.torch
import kiln.triton

SOURCE = r'''
extern "C" __global__ void wheel_fill(float* out, float value, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
template <typename T>
__global__ void wheel_scale(T* data, T factor, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
'''
compiled = {}
for target in sys.argv[1:]:
    try:
        binary = kiln.compile(kiln.Source.from_text(SOURCE, name="wheel.cu"), names=["wheel_scale<float>"],
                              target=target)
        compiled[target] = {"kind": binary.kind, "bytes": len(binary.data),
                            "lowered": binary.lowered_names["wheel_scale<float>"]}
    except kiln.DeviceUnavailableError as error:
        compiled[target] = {"unavailable": str(error)}
with open("/proc/self/maps") as maps:
    mapped = sorted({line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6})
print(json.dumps({"package": kiln.__file__, "version": kiln.__version__, "library": kiln.library_path,
                  "api": kiln.api_version(), "compiled": compiled, "mapped": [m for m in mapped if m.startswith("/")],
                  "cupy_imported": "cupy" in sys.modules,
                  "torch_or_triton_imported": "torch" in sys.modules or "triton" in sys.modules}))
"""
TARGETS = {"sm_90": "cubin", "gfx90a": "amd_code_object"}


class Failure(Exception):
    pass


def run(args, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 300)
    return subprocess.run(args, **kwargs)


def expect(condition, message):
    if not condition:
        raise Failure(message)


def shown(result):
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def prerequisites():
    """None when this Python can make a venv and install into it with pip --python, else why not."""
    for module in ("venv", "pip", "setuptools", "wheel"):
        if run([sys.executable, "-c", f"import {module}"]).returncode:
            return (f"{sys.executable} lacks {module} (Debian: python3-venv python3-pip python3-setuptools "
                    "python3-wheel)")
    version = run([sys.executable, "-m", "pip", "--version"]).stdout.split()
    numbers = tuple(int(part) for part in re.findall(r"\d+", version[1])[:2]) if len(version) > 1 else (0, 0)
    if numbers < (22, 3):
        return f"pip {'.'.join(map(str, numbers))} has no --python (22.3 or newer needed)"
    return None


def build_wheel(source_dir, build_dir, out_dir):
    env = dict(os.environ, KILN_WHEEL_NO_BUILD="1", KILN_PYTHON=sys.executable)
    result = run(["bash", os.path.join(source_dir, "scripts", "build_wheel.sh"), build_dir, out_dir], env=env,
                 timeout=600)
    expect(result.returncode == 0, "scripts/build_wheel.sh failed: " + shown(result))
    # It speaks only of what it made: no tool's complaint about a file it looked at (ldd on a license text).
    expect("not a dynamic executable" not in result.stdout + result.stderr,
           "scripts/build_wheel.sh ran ldd on a file that is no binary: " + shown(result))
    print(result.stdout.strip())
    return result.stdout.strip().splitlines()[-1]


def check_wheel_file(path, source_dir, version):
    name = os.path.basename(path)
    expect(re.fullmatch(rf"kiln-{re.escape(version)}-py3-none-linux_[a-z0-9_]+\.whl", name),
           f"wheel name {name}: expected kiln-{version}-py3-none-linux_<arch>.whl")
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        info = f"kiln-{version}.dist-info"
        package = os.path.join(source_dir, "python")
        shipped = set()
        for folder, _, files in os.walk(os.path.join(package, "kiln")):
            for file in files:
                if file.endswith(".py") or file == "VERSION":
                    shipped.add(os.path.relpath(os.path.join(folder, file), package).replace(os.sep, "/"))
        missing = sorted(shipped - names)
        expect(not missing, f"the wheel lacks {missing}")
        for binary in ("kiln/lib/libkiln.so.0", "kiln/bin/kiln"):
            expect(binary in names, f"the wheel lacks {binary}")
        mode = wheel.getinfo("kiln/bin/kiln").external_attr >> 16
        expect(mode & 0o111, f"kiln/bin/kiln is not executable in the wheel (mode {oct(mode)})")
        metadata = wheel.read(f"{info}/METADATA").decode()
        fields = {}
        for line in metadata.split("\n\n")[0].splitlines():
            key, _, value = line.partition(": ")
            fields.setdefault(key, value)
        expect(fields.get("Version") == version, f"METADATA Version {fields.get('Version')} is not {version}")
        expect(fields.get("Requires-Python"), "METADATA has no Requires-Python")
        expect(fields.get("Summary"), "METADATA has no Summary")
        expect(fields.get("License") == "MIT", f"METADATA License {fields.get('License')!r} is not MIT")
        names = wheel.namelist()
        expect(f"{info}/LICENSE" in names, f"the wheel has no {info}/LICENSE")
        for carried in (n for n in names if "/lib/" in n and ".so" in n and "libkiln" not in n and not n.endswith(".copyright")):
            expect(carried + ".copyright" in names, f"{carried} is carried without its license ({carried}.copyright)")
        tags = wheel.read(f"{info}/WHEEL").decode()
        expect("Root-Is-Purelib: false" in tags, "WHEEL says Root-Is-Purelib: true for a wheel with binaries")
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        expect(re.search(r"^kiln = kiln\._cli:main$", entry_points, re.M), f"no `kiln` command: {entry_points}")
    print(f"wheel file: {name}, {os.path.getsize(path) // 1024} KiB, {len(names)} files, metadata ok")


def clean_env(work, venv):
    """Nothing that points at a libkiln, a package or the trees: PATH has the venv and the system only."""
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": work, "KILN_CACHE_DIR": os.path.join(work, "cache"),
           "KILN_LOG": "warn", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    for name in ("CUDA_HOME", "KILN_CUDA_PATH", "ROCM_PATH", "TMPDIR"):  # where the toolkits are, as given
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def reference(source_dir, build_dir, work):
    """What the build tree's own libkiln compiles here: the targets the wheel must compile too."""
    env = dict(os.environ, KILN_LIBRARY=os.path.join(build_dir, "engine", "libkiln.so"),
               PYTHONPATH=os.path.join(source_dir, "python"), KILN_CACHE_DIR=os.path.join(work, "reference-cache"))
    result = run([sys.executable, "-c", PROBE, *TARGETS], env=env, cwd=work)
    expect(result.returncode == 0, "the probe failed with the build tree's libkiln: " + shown(result))
    return json.loads(result.stdout)["compiled"]


def ldd_outside(binary, venv):
    """The libraries `binary` loads that are neither the system's C/C++ runtime nor inside the venv."""
    result = run(["ldd", binary], env={"PATH": "/usr/bin:/bin"})
    expect(result.returncode == 0, f"ldd {binary}: " + shown(result))
    outside = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and not SYSTEM_LIBRARY.match(parts[0]):
            if not parts[2].startswith(venv + "/"):
                outside.append(f"{parts[0]} => {parts[2]}")
    return outside, result.stdout


def run_paths(binary):
    result = run(["readelf", "-d", binary])
    expect(result.returncode == 0, f"readelf -d {binary}: " + shown(result))
    return re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*)\]", result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    source_dir, build_dir = os.path.realpath(args.source_dir), os.path.realpath(args.build_dir)
    reason = prerequisites()
    if reason:
        print(f"wheel test skipped: {reason}")
        return SKIP
    with open(os.path.join(source_dir, "python", "kiln", "VERSION")) as file:
        version = file.read().strip()

    work = tempfile.mkdtemp(prefix="kiln-wheel-test-")
    try:
        for tree in (source_dir, build_dir):
            expect(not (work + "/").startswith(tree + "/"), f"the temporary folder {work} is inside {tree}")
        built = build_wheel(source_dir, build_dir, os.path.join(build_dir, "tests", "package", "wheel"))
        check_wheel_file(built, source_dir, version)
        wheel = shutil.copy(built, work)
        expected = {target: info for target, info in reference(source_dir, build_dir, work).items()
                    if "unavailable" not in info}
        if not expected:
            print("wheel test skipped: the build tree's libkiln compiles for none of "
                  f"{', '.join(TARGETS)} here (no NVRTC, no HIPRTC)")
            return SKIP

        venv = os.path.join(work, "venv")
        result = run([sys.executable, "-m", "venv", "--without-pip", venv])
        expect(result.returncode == 0, "python3 -m venv --without-pip: " + shown(result))
        result = run([sys.executable, "-m", "pip", "--python", os.path.join(venv, "bin", "python"), "install",
                      "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check", wheel],
                     env=dict(os.environ, PIP_NO_INDEX="1"), cwd=work)
        expect(result.returncode == 0, "pip --python <venv> install <wheel>: " + shown(result))
        env = clean_env(work, venv)

        result = run([os.path.join(venv, "bin", "python"), "-c", PROBE, *TARGETS], env=env, cwd=work)
        expect(result.returncode == 0, "the probe failed in the venv: " + shown(result))
        probe = json.loads(result.stdout)
        site = os.path.dirname(os.path.dirname(probe["package"]))
        expect(probe["package"].startswith(venv + "/"), f"kiln imported from {probe['package']}, not the venv")
        expect(probe["library"] == os.path.join(site, "kiln", "lib", "libkiln.so.0"),
               f"kiln.library_path is {probe['library']}, not the wheel's kiln/lib/libkiln.so.0 in {site}")
        expect(probe["version"] == version, f"kiln.__version__ {probe['version']} is not {version}")
        expect(not probe["cupy_imported"], "importing kiln.cupy imported CuPy")
        expect(not probe["torch_or_triton_imported"], "importing kiln.torch or kiln.triton imported torch or Triton")
        for target, info in expected.items():
            got = probe["compiled"][target]
            expect(got.get("kind") == TARGETS[target] and got.get("bytes", 0) > 0,
                   f"{target}: the build tree's libkiln compiles it ({info['kind']}) but the wheel's gives {got}")
            expect(got["lowered"] == info["lowered"], f"{target}: lowered name {got['lowered']} vs {info['lowered']}")
        trees = [path for path in probe["mapped"] for tree in (source_dir, build_dir) if path.startswith(tree + "/")]
        expect(not trees, f"the venv's process maps files of the source or build tree: {trees}")
        skipped = sorted(set(TARGETS) - set(expected))
        print(f"import kiln: {probe['library']} (API {probe['api']}), compiled {', '.join(sorted(expected))}"
              + (f" (not {', '.join(skipped)}: the build tree's libkiln cannot either)" if skipped else ""))

        result = run(["kiln", "--version"], env=env, cwd=work)
        expect(result.returncode == 0 and result.stdout.strip() == f"kiln {version}",
               f"the venv's `kiln --version`: " + shown(result))
        result = run(["kiln", "devices"], env=env, cwd=work)
        expect(result.returncode == 0, "the venv's `kiln devices`: " + shown(result))
        print(f"kiln --version: kiln {version}; kiln devices: exit 0, {len(result.stdout.splitlines())} lines")

        for binary in (probe["library"], os.path.join(site, "kiln", "bin", "kiln")):
            outside, listing = ldd_outside(binary, venv)
            expect(not outside and "not found" not in listing,
                   f"{binary} loads libraries from outside the venv: {outside}\n{listing}")
            paths = [entry for value in run_paths(binary) for entry in value.split(":")]
            expect(all(entry.startswith("$ORIGIN") for entry in paths), f"{binary} has run paths {paths}")
            print(f"{os.path.relpath(binary, site)}: run path {':'.join(paths) or '(none)'}, loads "
                  + ", ".join(line.split()[0] for line in listing.splitlines() if "=>" in line))
    except Failure as failure:
        print(f"wheel test FAILED: {failure}\n(the temporary folder {work} is kept)")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("wheel test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
