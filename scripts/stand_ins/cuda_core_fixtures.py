"""A pytest plugin for running cuda.core's own Program tests outside its repository
(scripts/h200_cuda_core_tests.py): those tests take fixtures from a conftest.py of cuda.core's tree that
also imports the tree's private helpers. Here only what the Program tests ask for: the driver
initialised once, and `init_cuda`, which makes device 0 current for a test and pops its context after."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _driver_initialised():
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    assert int(err) == 0, f"cuInit failed: {err}"


@pytest.fixture
def init_cuda():
    from cuda.bindings import driver
    from cuda.core import Device

    Device().set_current()
    yield
    err, ctx = driver.cuCtxGetCurrent()
    if int(err) == 0 and int(ctx) != 0:
        driver.cuCtxPopCurrent()
    # cuda.core remembers the current device per thread; forget it as the context is gone.
    from cuda.core import _device

    if hasattr(_device, "_tls") and hasattr(_device._tls, "devices"):
        del _device._tls.devices
