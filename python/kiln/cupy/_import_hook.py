"""KILN_CUPY=1 (read by `import kiln`): enable kiln.cupy as soon as CuPy is imported, through a meta path
finder that wraps CuPy's loader for that one import, or at once when CuPy is imported already. An
unsupported CuPy gets a warning here instead of enable()'s exception."""

import sys
import warnings

from ..errors import Error
from ._patch import enable


def _enable_or_warn():
    try:
        enable()
    except Error as error:
        warnings.warn(f"KILN_CUPY=1: CuPy keeps its own compiler: {error}", RuntimeWarning, stacklevel=2)


class _CuPyLoader:
    """Wraps CuPy's package loader: runs it, then enables kiln.cupy. Everything else is delegated."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        try:
            self._loader.exec_module(module)
        finally:
            # CuPy keeps its own loader: this wrapper is only here for the one import.
            module.__loader__ = self._loader
            if spec is not None:
                spec.loader = self._loader
        _enable_or_warn()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _CuPyFinder:
    """A meta path finder that waits for `import cupy`, then steps aside: it finds CuPy through the
    other finders and hands the import a loader that enables kiln.cupy once CuPy is initialised."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "cupy":
            return None
        _remove_finder()
        import importlib.util
        spec = importlib.util.find_spec("cupy")
        if spec is not None and spec.loader is not None:
            spec.loader = _CuPyLoader(spec.loader)
        return spec


def _remove_finder():
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _CuPyFinder)]


def enable_when_imported():
    """KILN_CUPY=1 at `import kiln`: enable now when CuPy is imported already, else when it is."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and getattr(cupy, "__spec__", None) is not None and "cupy.cuda.compiler" in sys.modules:
        _enable_or_warn()
    elif not any(isinstance(finder, _CuPyFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CuPyFinder())
