"""KILN_CUPY=1 (read by `import kiln`): enable kiln.cupy as soon as CuPy is imported, through a meta path
finder that wraps CuPy's loader for that one import (kiln._routing), or at once when CuPy is imported
already. An unsupported CuPy gets a warning here instead of enable()'s exception."""

import sys

from .. import _routing


def _enable_or_warn():
    from ._patch import enable

    _routing.enable_or_warn(enable, "KILN_CUPY", "CuPy")


def enable_when_imported():
    """KILN_CUPY=1 at `import kiln`: enable now when CuPy is imported already, else when it is."""
    _routing.when_imported("cupy", lambda module: "cupy.cuda.compiler" in sys.modules, _enable_or_warn)
