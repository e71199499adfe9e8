"""The stand-in's ProgramCacheResource and make_program_cache_key, shaped as cuda.core 1.2 documents them:

  ProgramCacheResource     an abstract base class (abc.ABC): a bytes-in / bytes-out mapping keyed by bytes
                           or str. Abstract: __getitem__ (KeyError when absent), __setitem__ (bytes-like or
                           an ObjectCode), __delitem__ (KeyError when absent), __len__, clear. Given: get
                           (self[key], else the default), update (a mapping or pairs), close (nothing),
                           __enter__/__exit__ (close). No __contains__.
  make_program_cache_key   keyword-only (code, code_type, options, target_type, name_expressions=(),
                           extra_digest=None) -> bytes (32: a digest of them); ValueError for options that
                           read files (include_path, pre_include, pch, use_pch, pch_dir) without an
                           extra_digest, and for create_pch (a side effect a hit would skip).
"""

import abc
import collections.abc
import hashlib

__all__ = ["ProgramCacheResource", "make_program_cache_key"]

_NEEDS_EXTRA_DIGEST = ("include_path", "pre_include", "pch", "use_pch", "pch_dir")


class ProgramCacheResource(abc.ABC):
    """Stand-in for cuda.core.utils.ProgramCacheResource."""

    @abc.abstractmethod
    def __getitem__(self, key):
        """The stored bytes; KeyError when absent."""

    @abc.abstractmethod
    def __setitem__(self, key, value):
        """Stores bytes-like or an ObjectCode's code."""

    @abc.abstractmethod
    def __delitem__(self, key):
        """Removes the entry; KeyError when absent."""

    @abc.abstractmethod
    def __len__(self):
        """The number of entries."""

    @abc.abstractmethod
    def clear(self):
        """Removes every entry."""

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def update(self, items, /):
        if isinstance(items, collections.abc.Mapping):
            items = items.items()
        for key, value in items:
            self[key] = value

    def close(self):
        """Nothing to release by default."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.close()


def make_program_cache_key(*, code, code_type, options, target_type, name_expressions=(), extra_digest=None):
    if options.create_pch:
        raise ValueError("create_pch has a side effect a cache hit would skip")
    if extra_digest is None:
        for field in _NEEDS_EXTRA_DIGEST:
            if getattr(options, field):
                raise ValueError(f"{field} reads files the key cannot see: pass an extra_digest")
    text = code.encode() if isinstance(code, str) else bytes(code)
    parts = repr((code_type, sorted(vars(options).items(), key=lambda item: item[0]), target_type,
                  sorted(repr(name) for name in name_expressions))).encode()
    return hashlib.blake2b(text + b"\0" + parts + b"\0" + (extra_digest or b""), digest_size=32).digest()
