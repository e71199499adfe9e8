"""A stand-in of Triton 3.6 for kiln.triton's tests: the parts of Triton's cache interface kiln.triton
touches (triton.runtime.cache: CacheManager, FileCacheManager, get_cache_manager and the dump and override
managers; triton.knobs.cache: dir, dump_dir, override_dir, manager_class read from the environment), and what
triton.compile and Triton's launcher build do with a cache manager (stand_in compiler.py and build.py).
Written for the tests from Triton's documented behaviour; no Triton code. TRITON_STAND_IN_VERSION overrides
the version (a test of an unsupported Triton)."""

import os

__version__ = os.environ.get("TRITON_STAND_IN_VERSION", "3.6.0")

from . import knobs  # noqa: E402,F401
