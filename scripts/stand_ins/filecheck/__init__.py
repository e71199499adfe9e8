"""A stand-in for the `filecheck` package (a Python port of LLVM's FileCheck), for running numba-cuda's
tests where it is not installed (the lent H200 machine): numba.cuda.testing imports it at import time,
though only tests that check generated code use it. Every name asked of this package or of any of its
submodules is a placeholder class; a test that really uses FileCheck fails with a clear error, with and
without kiln alike. Never installed into numba's tree: scripts/h200_numba.py puts it on sys.path."""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kiln-stand-in"


class _Placeholder:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("filecheck is a stand-in here (scripts/stand_ins/filecheck): the real package is needed")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Placeholder,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any filecheck.<sub> module: one whose every attribute is a placeholder class."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
