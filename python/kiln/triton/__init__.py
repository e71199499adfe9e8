"""Triton's kernel cache kept by kiln (Triton 3.x): torch.compile's and every other Triton kernel's files in
kiln's cache, with what kiln gives every entry.

Triton (and through it Inductor, torch.compile's compiler) keeps what it compiles with a cache manager that
TRITON_CACHE_MANAGER names. Switch kiln's on, one of:

    TRITON_CACHE_MANAGER=kiln.triton:CacheManager        the environment alone (kiln's package importable)
    import kiln.triton; kiln.triton.enable()             in code (raises kiln.Error for an unsupported Triton)
    python -m kiln.triton program.py [args]              a program you cannot edit (also: -m package.module)

What is stored: each compiled kernel's files (every IR stage, the binary, Triton's metadata) as one kiln
entry, its group, served whole or not at all; each other file Triton puts (its launcher modules, autotune
results) as an entry of its own. Entries are kiln's: checksummed and checked on every read (a damaged one is a
miss, removed: Triton compiles again), atomically published, in a private folder, held to the cache's size cap
(least recently used first), found in mounted packs and the remote tiers (KILN_CACHE_PACKS,
KILN_REMOTE_CACHE; with the fleet MAC), listed by the CLI (`kiln cache ls` shows each group's kernel and
target). Triton asks for paths: the files it is handed are written from kiln's checked bytes into Triton's own
cache folder's layout (KILN_TRITON_DIR, else TRITON_CACHE_DIR or ~/.triton/cache), a working copy kept
private and bounded (KILN_TRITON_DIR_MAXSIZE). What stays Triton's: its dump and override folders
(TRITON_KERNEL_DUMP, TRITON_KERNEL_OVERRIDE), and everything for a Triton this module does not support (a
warning, once). Details: _manager.py (the manager), _group.py (keys, the group's format, labels), _files.py
(the folder); stats() says what it did.

Importing this module does not import Triton; kiln.triton.CacheManager (made on first use, with Triton's
CacheManager as its base) and enable() do.
"""

# Where the work is done (this file only re-exports):
#   _manager.py   CacheManager: get_file, put, get_group, put_group over kiln's blobs
#   _group.py     kiln keys of Triton's files and groups, the group record's format, the labels the CLI shows
#   _files.py     handing files over: the private folder, atomic writes, its bound
#   _patch.py     enable(), disable(), enabled(); the check of Triton's version and cache interface
#   _stats.py     stats(), reset_stats()
#   _state.py     the state they share (the lock, the switch, the engine)

from ._group import NAMESPACE
from ._patch import MANAGER, SUPPORTED_VERSIONS, disable, enable, enabled
from ._stats import reset_stats, stats

__all__ = ["CacheManager", "enable", "disable", "enabled", "stats", "reset_stats", "SUPPORTED_VERSIONS", "NAMESPACE",
           "MANAGER"]


def __getattr__(name):
    # CacheManager is made on first use, with Triton's CacheManager as its base when Triton is importable:
    # importing this module must not import Triton (Triton itself looks the class up by name).
    if name == "CacheManager":
        from ._manager import manager_class
        return manager_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
