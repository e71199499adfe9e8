"""Fixtures of the Python tests (label `python`). CTest runs them with KILN_LIBRARY set to the build's
libkiln and PYTHONPATH to python/; run by hand from the repository root with

    KILN_LIBRARY=build/engine/libkiln.so PYTHONPATH=python python3 -m pytest tests/python -q

No GPU, CuPy or cuda.core are needed: compiles are for named targets (sm_90), and kiln.cupy and
kiln.cuda_core are tested against tests/python/stand_in/cupy and tests/python/stand_in/cuda.
"""

import contextlib
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STAND_IN = os.path.join(HERE, "stand_in")

import kiln  # noqa: E402
from kiln import _native  # noqa: E402

KERNELS = r"""
#include <kiln/rtc.h>

KILN_KERNEL void py_fill(float* out, float value, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

template <typename T>
__global__ void py_scale(T* data, T factor, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
"""


@pytest.fixture
def cache_dir(tmp_path):
    """An empty kiln cache of this test's own."""
    path = tmp_path / "kiln-cache"
    path.mkdir(mode=0o700)
    return str(path)


@pytest.fixture
def engine(cache_dir):
    with kiln.Engine(cache_dir=cache_dir) as value:
        yield value


_nvrtc_state = {}


def nvrtc_reason():
    """None when this machine's kiln can compile for sm_90 (NVRTC loads), else why not."""
    if "reason" not in _nvrtc_state:
        try:
            with kiln.Engine(cache_disable=True) as probe:
                probe.prewarm(kiln.Source.from_text("extern \"C\" __global__ void probe() {}\n"), "sm_90")
            _nvrtc_state["reason"] = None
        except kiln.DeviceUnavailableError as error:
            _nvrtc_state["reason"] = f"no NVRTC: {error.message}"
    return _nvrtc_state["reason"]


@pytest.fixture
def nvrtc():
    reason = nvrtc_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def compile_api(nvrtc):
    """Skips when libkiln predates kiln_compile (API version 2)."""
    version = kiln.api_version()
    if version < _native.COMPILE_API_VERSION:
        pytest.skip(f"{kiln.library_path} has kiln API version {version}: kiln_compile needs 2")


def forget(package):
    """Drops `package` and its submodules from sys.modules, so that the next import finds them anew."""
    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
        del sys.modules[name]


@contextlib.contextmanager
def stand_in(package, route):
    """While the block runs, tests/python/stand_in's `package` is what `import <package>` finds, freshly imported,
    ahead of any real one; after it, `route` (kiln.cupy, kiln.cuda_core, kiln.torch, kiln.triton) is disabled with
    its stats reset, the stand-in forgotten and any modules of that name loaded before restored."""
    saved = {name: module for name, module in sys.modules.items() if name == package or name.startswith(package + ".")}
    forget(package)
    sys.path.insert(0, STAND_IN)
    try:
        yield
    finally:
        route.disable()
        route.reset_stats()
        sys.path.remove(STAND_IN)
        forget(package)
        sys.modules.update(saved)


@pytest.fixture
def stand_in_cupy():
    """The stand-in CuPy, freshly imported (ahead of any real CuPy), and kiln.cupy disabled after."""
    import kiln.cupy
    with stand_in("cupy", kiln.cupy):
        import cupy
        assert cupy.__file__.startswith(STAND_IN), cupy.__file__
        yield cupy


@pytest.fixture
def core():
    """The stand-in cuda.core, freshly imported (ahead of any real one), and kiln.cuda_core disabled after."""
    import kiln.cuda_core
    from kiln.cuda_core._import_hook import _remove_finder
    _remove_finder()  # a KILN_CUDA_CORE=1 in the environment would enable at import: the tests decide
    with stand_in("cuda", kiln.cuda_core):
        import cuda.core
        assert cuda.core.__file__.startswith(STAND_IN), cuda.core.__file__
        yield cuda.core


@pytest.fixture
def routed(core, compile_api, cache_dir):
    """The stand-in cuda.core with kiln.cuda_core enabled on an engine of a fresh cache."""
    import kiln.cuda_core
    engine = kiln.Engine(cache_dir=cache_dir)
    kiln.cuda_core.enable(engine)
    return core, engine


def subprocess_env(**changes):
    """os.environ for a child Python: PYTHONPATH as this process sees the package, plus `changes`
    (a value of None removes the variable)."""
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
