"""KILN_CUDA_CORE=1 (read by `import kiln`): enable kiln.cuda_core as soon as cuda.core is imported,
through a meta path finder that wraps cuda.core's loader for that one import (kiln._routing), or at once
when cuda.core is imported already. An unsupported cuda.core gets a warning here instead of enable()'s
exception."""

from .. import _routing

_NAME = "cuda.core"


def _enable_or_warn():
    from ._patch import enable

    _routing.enable_or_warn(enable, "KILN_CUDA_CORE", "cuda.core")


def _remove_finder():
    _routing.remove_finder(_NAME)


def enable_when_imported():
    """Enable now when cuda.core is imported already, else when it is."""
    _routing.when_imported(_NAME, lambda module: hasattr(module, "Program"), _enable_or_warn)

