"""torch.cuda's parts kiln.torch meets: _compile_kernel, the device's properties, _utils."""

import os
import types

from . import _utils  # noqa: F401


def current_device():
    return 0


def get_device_properties(device=None):
    capability = os.environ.get("TORCH_STAND_IN_CC", "90")
    return types.SimpleNamespace(major=int(capability[:-1]), minor=int(capability[-1]), name="stand-in")


def _compile_kernel(kernel_source, kernel_name, compute_capability=None, cuda_include_dirs=None, nvcc_options=None):
    from torch.cuda._utils import _cuda_load_module, _nvrtc_compile

    binary, lowered = _nvrtc_compile(kernel_source, kernel_name, compute_capability, cuda_include_dirs, nvcc_options)
    return _cuda_load_module(binary, [lowered])[lowered]
