"""torch.cuda._utils's NVRTC call as torch 2.11 makes it, over the machine's NVRTC through ctypes."""

import ctypes
import glob
import os

import torch

loaded = []  # (binary, kernel names) handed to _cuda_load_module


def _nvrtc():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    home = torch.utils.cpp_extension.CUDA_HOME or ""
    names += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    for name in names:
        if "builtins" in name or ".alt." in name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("Could not find any NVRTC library")


def _get_gpu_rtc_compatible_flags():
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return [flag for flag in COMMON_NVCC_FLAGS if flag != "--expt-relaxed-constexpr"]


def _nvrtc_compile(kernel_source, kernel_name, compute_capability=None, cuda_include_dirs=None, nvcc_options=None,
                   auto_pch=False):
    """(CUBIN, lowered name) of `kernel_name` in `kernel_source`, compiled by NVRTC (nvrtcGetCUBIN)."""
    nvrtc = _nvrtc()

    def check(result):
        if result != 0:
            nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise RuntimeError(f"CUDA error: {nvrtc.nvrtcGetErrorString(result).decode()}")

    if compute_capability is None:
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        compute_capability = f"{properties.major}{properties.minor}"
    options = [f"--gpu-architecture=sm_{compute_capability}".encode()]
    options += [f"-I{path}".encode() for path in torch.utils.cpp_extension.include_paths("cuda")]
    options += [f"-I{path}".encode() for path in (cuda_include_dirs or ())]
    if auto_pch:
        nvcc_options = list(nvcc_options or ()) + ["--pch"]
    options += [option.encode() for option in (nvcc_options or ())]
    options += [flag.encode() for flag in _get_gpu_rtc_compatible_flags()]
    program = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), kernel_source.encode(), f"{kernel_name}.cu".encode(), 0,
                                   None, None))
    name = kernel_name.encode()
    check(nvrtc.nvrtcAddNameExpression(program, name))
    array = (ctypes.c_char_p * len(options))(*options)
    if nvrtc.nvrtcCompileProgram(program, len(options), array) != 0:
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(program, log)
        raise RuntimeError(f"Kernel compilation failed:\n{log.value.decode()}")
    size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)))
    cubin = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetCUBIN(program, cubin))
    lowered = ctypes.c_char_p()
    check(nvrtc.nvrtcGetLoweredName(program, name, ctypes.byref(lowered)))
    mangled = lowered.value.decode() if lowered.value is not None else ""
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return cubin.raw, mangled


class _Kernel:
    def __init__(self, binary, name):
        self.binary, self.name = binary, name


def _cuda_load_module(ptx, kernel_names=None):
    loaded.append((bytes(ptx), list(kernel_names or ())))
    return {name: _Kernel(bytes(ptx), name) for name in kernel_names or ()}
