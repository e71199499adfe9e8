"""What kiln.cupy, kiln.cuda_core, kiln.torch and kiln.triton share, each routing one runtime's compiles (or
its cache) through kiln: the version gate (which releases of the runtime a module was written for), running
a program with the routing on (`python -m kiln.<runtime>`), switching it on when the runtime is imported
(KILN_CUPY=1, KILN_CUDA_CORE=1, KILN_TORCH=1), giving the runtime its own function back (disable()), and the
counters behind their stats()."""

import importlib.util
import os
import re
import runpy
import sys
import warnings

from .errors import Error


# ---- the version gate --------------------------------------------------------------------------------------

def release(text):
    """(major, minor) of a version string ("14.2.0", "2.11.0+cu130", "3.6.0"), or None."""
    match = re.match(r"(\d+)\.(\d+)", text if isinstance(text, str) else "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def supported_text(supported):
    """"14.2.x" or "3.5.x, 3.6.x": the releases of SUPPORTED_VERSIONS as a message names them."""
    return ", ".join(f"{major}.{minor}.x" for major, minor in supported)


def version_problem(package, runtime, module, supported, unchanged):
    """Why `package` (e.g. "kiln.cupy") does not route the imported `module` of `runtime` ("CuPy"): its
    __version__ is not one of the (major, minor) releases in `supported`; None when it is. `unchanged` ends
    the message with what happens instead ("CuPy compiles as it always does"). The one check every routing
    module makes before it touches a runtime's internals: a module that patched internals it was not written
    for could change a program's results silently."""
    version = getattr(module, "__version__", None)
    if release(version) in supported:
        return None
    where = os.path.dirname(getattr(module, "__file__", None) or "?")
    return (f"{package} supports {runtime} {supported_text(supported)}; this is {runtime} {version} ({where}): "
            f"nothing was changed, {unchanged}")


def check_version(package, runtime, module, supported, unchanged):
    """version_problem(), raised as kiln.Error; returns the module's (major, minor) when it is supported."""
    problem = version_problem(package, runtime, module, supported, unchanged)
    if problem:
        raise Error(problem)
    return release(module.__version__)


# ---- python -m kiln.<runtime> PROGRAM.py | -m MODULE --------------------------------------------------------

def run_main(argv, package, enable):
    """Runs PROGRAM.py or -m MODULE with its own argv after `enable()`. Exit status: 0 after the program
    ran (its own exit raises SystemExit through here); 2 for a usage error or when enable() refuses,
    saying why (as `package`'s message)."""
    usage = f"usage: python -m {package} PROGRAM.py [ARGS...] | -m MODULE [ARGS...]"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m" and len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    try:
        enable()
    except Error as error:
        text = str(error)  # most of enable()'s messages name the package already
        print(text if text.startswith(package) else f"{package}: {text}", file=sys.stderr)
        return 2
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python PROGRAM.py` sets it
        runpy.run_path(argv[0], run_name="__main__")
    return 0


# ---- enabling when the runtime is imported --------------------------------------------------------------

class _Loader:
    """Wraps the runtime's package loader: runs it, then calls `then`. Everything else is delegated."""

    def __init__(self, loader, then):
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        try:
            self._loader.exec_module(module)
        finally:
            # The runtime keeps its own loader: this wrapper is only here for the one import.
            module.__loader__ = self._loader
            if spec is not None:
                spec.loader = self._loader
        self._then()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class ImportFinder:
    """A meta path finder that waits for `import <module>`, then steps aside: it finds the module through
    the other finders and hands the import a loader that calls `then` once the module is initialised."""

    def __init__(self, module, then):
        self.module = module
        self._then = then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        remove_finder(self.module)
        spec = importlib.util.find_spec(self.module)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._then)
        return spec


def remove_finder(module):
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, ImportFinder) and f.module == module)]


def when_imported(module, ready, then):
    """Calls `then` now when `module` is imported and `ready(module object)` says it is initialised, else
    once it is imported (a finder on sys.meta_path, one per module)."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None and ready(loaded):
        then()
    elif not any(isinstance(f, ImportFinder) and f.module == module for f in sys.meta_path):
        sys.meta_path.insert(0, ImportFinder(module, then))


def enable_or_warn(enable, switch, runtime):
    """enable(), or a warning saying why `runtime` keeps its own compiler (a switch in the environment must
    not make an import fail)."""
    try:
        enable()
    except Error as error:
        warnings.warn(f"{switch}=1: {runtime} keeps its own compiler: {error}", RuntimeWarning, stacklevel=3)


# ---- disable() ----------------------------------------------------------------------------------------------

def put_back(state, places, ours):
    """What every routing module's disable() does, under `state.lock` (its _state module): when it is enabled,
    switch it off, drop its engine, and give each (module name, attribute) of `places` back `state.original`
    where that attribute still holds what enable() put there (`ours()`, a tuple, read under the lock: something
    installed over kiln's since is left alone). A module not imported is left alone too."""
    with state.lock:
        if not state.enabled:
            return
        state.enabled = False
        state.engine = None
        installed = ours()
        for module_name, attribute in places:
            module = sys.modules.get(module_name)
            if module is not None and any(getattr(module, attribute, None) is thing for thing in installed):
                setattr(module, attribute, state.original)


# ---- warnings ---------------------------------------------------------------------------------------------

class OnceWarner:
    """Warns about each fallback reason once per process: `prefix` + the reason, as a RuntimeWarning pointing
    at the code that called the routed compile (`stacklevel` frames above warn's caller)."""

    def __init__(self, lock, prefix, stacklevel):
        self._lock = lock
        self._prefix = prefix
        self._stacklevel = stacklevel
        self._warned = set()

    def warn(self, reason):
        with self._lock:
            if reason in self._warned:
                return
            self._warned.add(reason)
        warnings.warn(f"{self._prefix}{reason}", RuntimeWarning, stacklevel=self._stacklevel + 1)


# ---- stats ------------------------------------------------------------------------------------------------

class Counters:
    """What a routing module did: `routed` {origin: count}, `fallbacks` {reason: count}, `compile_errors`,
    and `seconds` {part: total} for the parts named at construction. Guarded by the module's lock."""

    def __init__(self, lock, parts):
        self._lock = lock
        self._parts = tuple(parts)
        self.reset()

    def count(self, kind, key):
        """One more `key` in the table `kind` ("routed" by origin, "fallbacks" by reason)."""
        with self._lock:
            table = self._counts[kind]
            table[key] = table.get(key, 0) + 1

    def count_compile_error(self):
        with self._lock:
            self._counts["compile_errors"] += 1

    def add_seconds(self, *seconds):
        """The time one routed compile spent in each part, in the order the parts were named."""
        if len(seconds) != len(self._parts):
            raise TypeError(f"add_seconds takes {len(self._parts)} values ({', '.join(self._parts)})")
        with self._lock:
            for part, value in zip(self._parts, seconds):
                self._counts["seconds"][part] += value

    def snapshot(self):
        with self._lock:
            return {"routed": dict(self._counts["routed"]), "fallbacks": dict(self._counts["fallbacks"]),
                    "compile_errors": self._counts["compile_errors"], "seconds": dict(self._counts["seconds"])}

    def reset(self):
        with self._lock:
            self._counts = {"routed": {}, "fallbacks": {}, "compile_errors": 0,
                            "seconds": {part: 0.0 for part in self._parts}}
