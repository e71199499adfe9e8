"""triton.knobs.cache as Triton 3.4+ has it: each setting read from the environment when asked, unless a
program set it (then the value set, until deleted)."""

import importlib
import os


class _FromEnvironment:
    def __init__(self, variable, default=None, is_class=False):
        self.variable, self.default, self.is_class = variable, default, is_class

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if self.name in obj.__dict__:
            return obj.__dict__[self.name]
        value = os.environ.get(self.variable, "").strip()
        if not value:
            return self.default() if callable(self.default) else self.default
        if self.is_class:
            module, name = value.split(":", 1)
            found = getattr(importlib.import_module(module), name)
            if not any(c.__name__ == "CacheManager" for c in found.mro()):  # as Triton checks the class it names
                raise RuntimeError(f"Unable to use '{value}' from {self.variable}: not of type 'CacheManager'")
            return found
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value

    def __delete__(self, obj):
        obj.__dict__.pop(self.name, None)


def _triton_dir(what):
    return lambda: os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", what)


class _CacheKnobs:
    dir = _FromEnvironment("TRITON_CACHE_DIR", _triton_dir("cache"))
    dump_dir = _FromEnvironment("TRITON_DUMP_DIR", _triton_dir("dump"))
    override_dir = _FromEnvironment("TRITON_OVERRIDE_DIR", _triton_dir("override"))
    manager_class = _FromEnvironment("TRITON_CACHE_MANAGER", None, is_class=True)


cache = _CacheKnobs()
