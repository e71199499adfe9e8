"""torch.utils.cpp_extension's include_paths and COMMON_NVCC_FLAGS, as torch's NVRTC helper uses them."""

import os

COMMON_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                     "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")


def include_paths(device_type="cpu"):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.join(here, "include"), os.path.join(here, "include", "absent", "api")]
    if device_type == "cuda":
        if CUDA_HOME is None:
            raise OSError("CUDA_HOME environment variable is not set")
        paths.append(os.path.join(CUDA_HOME, "include"))
    return paths
