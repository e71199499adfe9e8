"""The `cuda` package of the stand-in (tests/python/stand_in): only cuda.core is stood in. Like the real
namespace package it merges with other `cuda` folders on sys.path, so a real cuda.bindings next to it
still imports; the stand-in's folder comes first, so `cuda.core` is this one."""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)
