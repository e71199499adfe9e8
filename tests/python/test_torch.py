"""kiln.torch: torch.cuda._compile_kernel's NVRTC compiles through kiln, against the stand-in of torch 2.11
(tests/python/stand_in/torch, whose _nvrtc_compile compiles with the machine's NVRTC as torch's does). No GPU,
no torch. What is checked: the CUBIN and lowered name kiln returns are byte for byte those of torch's own call
(extern "C" and template kernels, nvcc_options, cuda_include_dirs); a fresh process is a disk hit; an edited
header in cuda_include_dirs compiles again; compile errors as torch raises them; fallbacks; the version and
signature gate; KILN_TORCH=1 and python -m kiln.torch; disable() restores torch's function."""

import json
import os
import subprocess
import sys

import pytest

import kiln
from kiln import _native
from conftest import REPO, STAND_IN, stand_in, subprocess_env

ADD = r"""
extern "C" __global__ void add_tensors(const float* a, const float* b, float* c, int n) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""

TEMPLATE = r"""
#include "scale.h"
template <typename T> __global__ void scale(T* data, T factor, int n) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  if (i < n) data[i] = data[i] * factor + T(OFFSET);
}
"""


@pytest.fixture
def torch(monkeypatch, compile_api):
    """The stand-in torch, freshly imported; kiln.torch disabled after. Skips where its NVRTC cannot load."""
    import kiln.torch
    for name in ("TORCH_STAND_IN_VERSION", "TORCH_STAND_IN_HIP", "TORCH_STAND_IN_CC", "KILN_TORCH"):
        monkeypatch.delenv(name, raising=False)
    with stand_in("torch", kiln.torch):
        import torch
        assert torch.__file__.startswith(STAND_IN), torch.__file__
        try:
            torch.cuda._utils._nvrtc()
        except OSError as error:
            pytest.skip(f"the stand-in torch needs NVRTC: {error}")
        yield torch


@pytest.fixture
def routed(torch, cache_dir):
    import kiln.torch
    engine = kiln.Engine(cache_dir=cache_dir, runtime=kiln.api_version() < _native.LABEL_API_VERSION)
    kiln.torch.enable(engine)
    return torch, engine


def test_import_does_not_import_torch():
    code = "import kiln.torch, sys; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(PYTHONPATH=os.path.join(REPO, "python")),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_the_same_cubin_and_name_as_torchs_own(routed):
    torch, engine = routed
    import kiln.torch
    own = kiln.torch._state.original(ADD, "add_tensors")  # torch's own call, NVRTC without kiln
    kernel = torch.cuda._compile_kernel(ADD, "add_tensors")
    assert (kernel.binary, kernel.name) == own
    assert own[0].startswith(b"\x7fELF") and own[1] == "add_tensors"
    assert torch.cuda._utils.loaded[-1] == (own[0], ["add_tensors"])  # loaded by torch's own loader
    stats = kiln.torch.stats()
    assert stats["routed"] == {"compiled": 1} and stats["output"] == "cubin" and not stats["fallbacks"]
    again = torch.cuda._compile_kernel(ADD, "add_tensors")
    assert again.binary == own[0] and kiln.torch.stats()["routed"] == {"compiled": 1, "memory": 1}


def test_template_names_include_dirs_and_options_as_torch_passes_them(routed, cache_dir, tmp_path):
    torch, engine = routed
    import kiln.torch
    headers = tmp_path / "headers"
    headers.mkdir()
    (headers / "scale.h").write_text("#define OFFSET 3\n")
    arguments = (TEMPLATE, "scale<float>", "90", [str(headers)], ["-DEXTRA=1", "--use_fast_math", "-std=c++17"])
    own = kiln.torch._state.original(*arguments)
    kernel = torch.cuda._compile_kernel(*arguments)
    assert (kernel.binary, kernel.name) == own and own[1].startswith("_Z5scaleIfEvPT_S0_i")
    # An edited header is another compile (kiln keys the folder by its headers' bytes) for an engine that has
    # not served the request from its memory already (a later process, here a fresh engine on the same cache).
    (headers / "scale.h").write_text("#define OFFSET 4\n")
    kiln.torch.enable(kiln.Engine(cache_dir=cache_dir))
    edited = torch.cuda._compile_kernel(*arguments)
    assert edited.binary != own[0] and edited.binary == kiln.torch._state.original(*arguments)[0]
    (headers / "scale.h").write_text("#define OFFSET 3\n")
    kiln.torch.enable(kiln.Engine(cache_dir=cache_dir))
    assert torch.cuda._compile_kernel(*arguments).binary == own[0]
    assert kiln.torch.stats()["routed"] == {"compiled": 2, "disk": 1}
    # Another architecture: torch's sm_XY, kiln's target.
    assert torch.cuda._compile_kernel(ADD, "add_tensors", "80").binary == kiln.torch._state.original(ADD, "add_tensors",
                                                                                                     "80")[0]


def test_a_fresh_process_is_a_disk_hit(torch, cache_dir):
    code = ("import json, kiln.torch, torch\n"
            "kiln.torch.enable()\n"
            f"kernel = torch.cuda._compile_kernel({ADD!r}, 'add_tensors')\n"
            "print(json.dumps({'stats': kiln.torch.stats()['routed'], 'size': len(kernel.binary)}))\n")
    env = subprocess_env(PYTHONPATH=os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]), KILN_CACHE_DIR=cache_dir,
                         KILN_TORCH=None)
    seen = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        seen.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert seen[0]["stats"] == {"compiled": 1} and seen[1]["stats"] == {"disk": 1}
    assert seen[0]["size"] == seen[1]["size"]


def test_a_compile_error_is_torchs_runtime_error(routed):
    torch, engine = routed
    import kiln.torch
    with pytest.raises(RuntimeError, match="Kernel compilation failed:\n.*undefined_thing"):
        torch.cuda._compile_kernel('extern "C" __global__ void k() { undefined_thing(); }', "k")
    assert kiln.torch.stats()["compile_errors"] == 1


def test_requests_kiln_does_not_take_go_to_torch(routed, monkeypatch):
    torch, engine = routed
    import kiln.torch
    kernel = torch.cuda._compile_kernel(ADD, "add_tensors", nvcc_options=["-rdc=true"])
    assert kernel.binary.startswith(b"\x7fELF")
    assert list(kiln.torch.stats()["fallbacks"]) == ["-rdc=true: relocatable device code / LTO stays with CuPy"]
    monkeypatch.setattr(torch.version, "hip", "6.4")

    def no_hiprtc():
        raise OSError("no HIPRTC here")

    monkeypatch.setattr(torch.cuda._utils, "_nvrtc", no_hiprtc)
    with pytest.raises(OSError, match="no HIPRTC"):  # torch's own call, as a HIP build makes it
        torch.cuda._compile_kernel(ADD, "add_tensors")
    assert kiln.torch.stats()["fallbacks"]["a HIP build of torch"] == 1


def test_enable_twice_and_disable_restores(torch, compile_api):
    import kiln.torch
    own = torch.cuda._utils._nvrtc_compile
    kiln.torch.enable()
    kiln.torch.enable()
    assert torch.cuda._utils._nvrtc_compile is not own and kiln.torch.enabled()
    assert kiln.torch._state.original is own
    kiln.torch.disable()
    assert torch.cuda._utils._nvrtc_compile is own and not kiln.torch.enabled()


def test_an_unsupported_torch_is_refused(torch, monkeypatch):
    import kiln.torch
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    with pytest.raises(kiln.Error, match="kiln.torch supports torch 2.11.x; this is torch 2.8.0"):
        kiln.torch.enable()
    assert not kiln.torch.enabled()


def test_a_changed_function_is_refused(torch, monkeypatch):
    import kiln.torch

    def different(kernel_source, kernel_name, arch):
        return b"", ""

    monkeypatch.setattr(torch.cuda._utils, "_nvrtc_compile", different)
    with pytest.raises(kiln.Error, match="is not one kiln.torch was written for"):
        kiln.torch.enable()
    assert torch.cuda._utils._nvrtc_compile is different


def _child(code, **env):
    env.setdefault("PYTHONPATH", os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]))
    return subprocess.run([sys.executable, "-c", code], env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=120)


def test_kiln_torch_1_enables_when_torch_is_imported(torch, cache_dir):
    code = ("import kiln, sys\n"
            "assert 'torch' not in sys.modules\n"
            "import torch, kiln.torch\n"
            f"torch.cuda._compile_kernel({ADD!r}, 'add_tensors')\n"
            "print(kiln.torch.enabled(), kiln.torch.stats()['routed'])\n")
    result = _child(code, KILN_TORCH="1", KILN_CACHE_DIR=cache_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "{'compiled':", "1}"]
    warned = _child("import kiln, torch, kiln.torch; print(kiln.torch.enabled())", KILN_TORCH="1",
                    TORCH_STAND_IN_VERSION="2.8.0", KILN_CACHE_DIR=cache_dir)
    assert warned.returncode == 0 and warned.stdout.strip() == "False"
    assert "KILN_TORCH=1: torch keeps its own compiler" in warned.stderr


def test_python_m_kiln_torch_runs_a_program(torch, cache_dir, tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import sys, torch, kiln.torch\n"
                       f"torch.cuda._compile_kernel({ADD!r}, 'add_tensors')\n"
                       "print(sys.argv[1:], kiln.torch.stats()['routed'])\n")
    result = subprocess.run([sys.executable, "-m", "kiln.torch", str(program), "--x"],
                            env=subprocess_env(PYTHONPATH=os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]),
                                               KILN_CACHE_DIR=cache_dir), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--x'] {'compiled': 1}"
