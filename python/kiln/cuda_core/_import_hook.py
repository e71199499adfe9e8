"""KILN_CUDA_CORE=1 (read by `import kiln`): enable kiln.cuda_core as soon as cuda.core is imported,
through a meta path finder that wraps cuda.core's loader for that one import, or at once when cuda.core
is imported already. An unsupported cuda.core gets a warning here instead of enable()'s exception."""

import os
import sys
import warnings

from ..errors import Error

_NAME = "cuda.core"


def _enable_or_warn():
    from ._patch import enable

    try:
        enable()
    except Error as error:
        warnings.warn(f"KILN_CUDA_CORE=1: cuda.core keeps its own compiler: {error}", RuntimeWarning, stacklevel=2)


class _Loader:
    """Wraps cuda.core's package loader: runs it, then enables kiln.cuda_core. Everything else is delegated."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        try:
            self._loader.exec_module(module)
        finally:
            # cuda.core keeps its own loader: this wrapper is only here for the one import.
            module.__loader__ = self._loader
            if spec is not None:
                spec.loader = self._loader
        _enable_or_warn()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder:
    """A meta path finder that waits for `import cuda.core`, then steps aside: it finds cuda.core through
    the other finders and hands the import a loader that enables kiln.cuda_core once cuda.core is
    initialised."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _NAME:
            return None
        _remove_finder()
        import importlib.util
        spec = importlib.util.find_spec(_NAME)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def _remove_finder():
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _Finder)]


def enable_when_imported():
    """Enable now when cuda.core is imported already, else when it is."""
    core = sys.modules.get(_NAME)
    if core is not None and getattr(core, "__spec__", None) is not None and hasattr(core, "Program"):
        _enable_or_warn()
    elif not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def from_environment():
    """KILN_CUDA_CORE at `import kiln`: 1 routes cuda.core through kiln; 0 or unset does nothing; anything
    else is ignored with a warning."""
    value = os.environ.get("KILN_CUDA_CORE", "")
    if value == "1":
        enable_when_imported()
    elif value not in ("", "0"):
        warnings.warn(f"KILN_CUDA_CORE={value!r} ignored: use 1 (route cuda.core's compiles through kiln) or 0",
                      RuntimeWarning, stacklevel=4)
