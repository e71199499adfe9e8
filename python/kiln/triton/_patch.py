"""Switching kiln's cache manager on and off for Triton, and the check of Triton's version and cache
interface every manager makes first."""

import inspect
import os
import sys
import warnings
import weakref

from .. import _native, _routing
from ..errors import Error
from . import _state

# (major, minor) of the Triton releases whose cache interface this module was written for: 3.x, whose
# triton.runtime.cache.CacheManager declares get_file, put, get_group and put_group, and whose
# FileCacheManager is made as FileCacheManager(key, override=False, dump=False).
SUPPORTED_VERSIONS = tuple((3, minor) for minor in range(7))
MANAGER = "kiln.triton:CacheManager"  # TRITON_CACHE_MANAGER's value
_ABSTRACT = frozenset({"get_file", "put", "get_group", "put_group"})
_UNCHANGED = "Triton keeps its own cache (FileCacheManager)"

_refusal = weakref.WeakKeyDictionary()  # the triton module -> why kiln does not keep its files (None: it does)


def _interface_problem(triton):
    """Why Triton's cache interface is not the one kiln.triton was written for, or None."""
    try:
        from triton.runtime import cache
    except ImportError as error:
        return f"triton.runtime.cache cannot be imported ({error})"
    base, files = getattr(cache, "CacheManager", None), getattr(cache, "FileCacheManager", None)
    if not isinstance(base, type) or not isinstance(files, type):
        return f"Triton {triton.__version__} has no triton.runtime.cache.CacheManager or FileCacheManager"
    abstract = frozenset(getattr(base, "__abstractmethods__", ()))
    if abstract != _ABSTRACT:
        return (f"triton.runtime.cache.CacheManager of Triton {triton.__version__} declares {sorted(abstract)}, not "
                f"the {sorted(_ABSTRACT)} kiln.triton was written for")
    try:
        parameters = [(p.name, p.default) for p in inspect.signature(files.__init__).parameters.values()]
    except (TypeError, ValueError):
        parameters = None
    if parameters != [("self", inspect.Parameter.empty), ("key", inspect.Parameter.empty), ("override", False),
                      ("dump", False)]:
        return (f"FileCacheManager of Triton {triton.__version__} is not made as FileCacheManager(key, override=False, "
                f"dump=False) (parameters {parameters})")
    return None


def problem():
    """Why kiln does not keep this Triton's files (not importable, a version or cache interface kiln.triton was
    not written for, a libkiln without blobs), or None. Checked once per imported Triton."""
    triton = sys.modules.get("triton")
    if triton is None:
        try:
            import triton
        except ImportError as error:
            return f"kiln.triton: Triton cannot be imported ({error})"
    with _state.lock:
        if triton in _refusal:
            return _refusal[triton]
    found = _routing.version_problem("kiln.triton", "Triton", triton, SUPPORTED_VERSIONS, _UNCHANGED)
    if found is None:
        interface = _interface_problem(triton)
        if interface:
            found = f"kiln.triton: {interface}: nothing was changed, {_UNCHANGED}"
    if found is None:
        try:
            _native.require(_native.BLOB_API_VERSION, "kiln.triton (kiln_blob_*)")
        except Error as error:
            found = f"kiln.triton: {error}: {_UNCHANGED}"
    with _state.lock:
        _refusal[triton] = found
    return found


_warned = set()


def warn_refused(reason):
    """The warning a manager made through TRITON_CACHE_MANAGER gives, once per reason, when it keeps Triton's
    own FileCacheManager (an environment variable must not make a program fail)."""
    with _state.lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"TRITON_CACHE_MANAGER={MANAGER}: {reason}", RuntimeWarning, stacklevel=4)


def _knobs_cache():
    """triton.knobs.cache when Triton (3.4+) is imported and has one, else None."""
    knobs = sys.modules.get("triton.knobs")
    cache = getattr(knobs, "cache", None) if knobs is not None else None
    return cache if cache is not None and hasattr(type(cache), "manager_class") else None


def enable(engine=None):
    """Makes Triton keep its kernel cache in kiln from now on: TRITON_CACHE_MANAGER is set to
    kiln.triton:CacheManager (so Inductor's compile workers and other child processes do the same) and, where
    a program set triton.knobs.cache.manager_class itself, that knob too. Kernels Triton loaded already stay
    as they are. `engine`: the kiln.Engine to keep the files with in this process (default: one from the
    KILN_* environment). Raises kiln.Error, changing nothing, when Triton cannot be imported, is not 3.x, its
    cache interface differs, or libkiln is too old (blobs are API 6). Enabling twice is harmless."""
    with _state.lock:
        reason = problem()
        if reason:
            raise Error(reason)
        if engine is not None:
            _state.given_engine = (os.getpid(), engine)
        if not _state.enabled:
            _state.saved_environment = ("TRITON_CACHE_MANAGER" in os.environ, os.environ.get("TRITON_CACHE_MANAGER"))
            cache = _knobs_cache()
            _state.saved_knob = None
            if cache is not None and "manager_class" in vars(cache):
                _state.saved_knob = vars(cache)["manager_class"]
        os.environ["TRITON_CACHE_MANAGER"] = MANAGER
        cache = _knobs_cache()
        if cache is not None and "manager_class" in vars(cache):
            from . import _manager

            cache.manager_class = _manager.manager_class()
        _state.enabled = True


def disable():
    """Gives Triton its own cache back (TRITON_CACHE_MANAGER and the knob as they were before enable()).
    Kernels loaded stay loaded; kiln's cache keeps what it stored."""
    with _state.lock:
        if not _state.enabled:
            return
        _state.enabled = False
        _state.given_engine = None
        had, value = _state.saved_environment or (False, None)
        if had:
            os.environ["TRITON_CACHE_MANAGER"] = value
        else:
            os.environ.pop("TRITON_CACHE_MANAGER", None)
        cache = _knobs_cache()
        if cache is not None and "manager_class" in vars(cache):
            if _state.saved_knob is not None:
                cache.manager_class = _state.saved_knob
            else:
                vars(cache).pop("manager_class", None)  # back to reading TRITON_CACHE_MANAGER


def enabled():
    """True while Triton's cache manager is kiln's: by enable(), or by TRITON_CACHE_MANAGER in the
    environment (and no other class set through triton.knobs)."""
    cache = _knobs_cache()
    if cache is not None and "manager_class" in vars(cache):
        chosen = vars(cache)["manager_class"]
        return getattr(chosen, "__module__", "").startswith("kiln.triton")
    return os.environ.get("TRITON_CACHE_MANAGER") == MANAGER
