"""kiln.cuda_core.ProgramCache: cuda.core's ProgramCacheResource over kiln's disk cache.

cuda.core 1.2's Program.compile(..., cache=...) looks a compile up with cache.get(key) (the key from
cuda.core.utils.make_program_cache_key: bytes) and stores what it compiled with cache[key] = object_code;
a hit comes back as the raw binary bytes, from which cuda.core rebuilds the ObjectCode. This class keeps
that contract (reads return the code's bytes) and stores each value as an entry of kiln's cache under
(namespace, key) (libkiln's kiln_blob_*, API 6), so what kiln gives every entry comes with it: a checksum
verified on each read (a damaged entry is removed and answered as a miss), the size cap with least
recently used eviction, `kiln cache ls/show/verify/stats/prune`, packs and the Redis remote tier.

What it keeps beside the bytes (the value format below): the code type, the ObjectCode's name and its
symbol_mapping, which cuda.core's own caches drop; get_object_code() rebuilds the whole ObjectCode.

With kiln.cuda_core enabled, Program.compile(..., cache=<a ProgramCache>) is served by kiln itself (see
_program.py): kiln's key covers the headers' content and the name expressions, which cuda.core's key
cannot (it refuses include_path without an extra_digest, and name_expressions with cache=).

The value format (one blob entry's payload), version 1:
    magic    8 bytes  b"kiln.oc\\n"
    version  1 byte   1
    length   4 bytes  little-endian: the header's size
    header   UTF-8 JSON object: {"code_type": str or null, "name": str, "code_size": int,
                                 "symbol_mapping": [[key_tag, key, value_tag, value], ...]}
             a tag is "s" (the item is that str) or "b" (bytes, written as hex); null code_type: a value
             stored as bare bytes (cuda.core's wrapper stores the code only)
    code     the rest: exactly code_size bytes
A value that does not follow it (another version, a cut or foreign value) is a miss, and is removed.
"""

import collections.abc
import os
import threading

from .. import _api, _native, _record
from ..errors import Error

NAMESPACE = "cuda.core"
MAGIC = b"kiln.oc\n"
VERSION = 1
# cuda.core's ObjectCode code types (ObjectCode.code_type).
CODE_TYPES = ("cubin", "ptx", "ltoir", "fatbin", "object", "library")


class ValueFormatError(ValueError):
    """A stored value that is not in the format above."""


def _tagged(item):
    if isinstance(item, str):
        return ["s", item]
    if isinstance(item, (bytes, bytearray)):
        return ["b", bytes(item).hex()]
    raise TypeError(f"symbol_mapping holds a {type(item).__name__} ({item!r}); kiln keeps str and bytes only")


def _untagged(tag, text):
    if tag == "s" and isinstance(text, str):
        return text
    if tag == "b" and isinstance(text, str):
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise ValueFormatError(f"symbol_mapping: {text[:40]!r} is not hex") from None
    raise ValueFormatError(f"symbol_mapping: unknown item tag {tag!r}")


def encode(code, code_type=None, name="", symbol_mapping=None):
    """The stored form of one value (the format above)."""
    if code_type is not None and code_type not in CODE_TYPES:
        raise ValueError(f"code_type {code_type!r} is not one of cuda.core's ({', '.join(CODE_TYPES)})")
    mapping = [_tagged(key) + _tagged(value) for key, value in (symbol_mapping or {}).items()]
    return _record.frame(MAGIC, VERSION, {"code_type": code_type, "name": name if name is not None else "",
                                          "code_size": len(code), "symbol_mapping": mapping}, code)


class Record:
    """A decoded value: the code's bytes, its code type (None: stored as bare bytes), the ObjectCode's
    name and symbol_mapping."""

    __slots__ = ("code", "code_type", "name", "symbol_mapping")

    def __init__(self, code, code_type, name, symbol_mapping):
        self.code, self.code_type, self.name, self.symbol_mapping = code, code_type, name, symbol_mapping


def decode(data):
    """The Record a stored value holds; ValueFormatError when it is not one (see the format above)."""
    header, code = _record.unframe(data, MAGIC, VERSION, "a kiln.cuda_core value", ValueFormatError)
    code_type, name, size, mapping = (header.get("code_type"), header.get("name"), header.get("code_size"),
                                      header.get("symbol_mapping"))
    if code_type is not None and code_type not in CODE_TYPES:
        raise ValueFormatError(f"code_type {code_type!r}")
    if not isinstance(name, str):
        raise ValueFormatError("name is not a str")
    if type(size) is not int or size != len(code):
        raise ValueFormatError(f"code_size {size!r}, but {len(code)} bytes of code follow")
    if not isinstance(mapping, list) or not all(isinstance(item, list) and len(item) == 4 for item in mapping):
        raise ValueFormatError("symbol_mapping is not a list of [tag, key, tag, value]")
    symbols = {}
    for key_tag, key, value_tag, value in mapping:
        symbols[_untagged(key_tag, key)] = _untagged(value_tag, value)
    return Record(bytes(code), code_type, name, symbols)


def _object_code_class():
    try:
        from cuda.core import ObjectCode
    except ImportError as error:
        raise Error(f"kiln.cuda_core.ProgramCache: an ObjectCode needs cuda.core ({error})") from None
    return ObjectCode


def _from_value(value):
    """encode()'s arguments for what __setitem__ is given: bytes-like (the code alone, as cuda.core's own
    wrapper stores it) or an ObjectCode (its code, code type, name and symbol_mapping; a path-backed one
    is read now, so the entry holds the code, not a path that may change)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None, "", {}
    code = getattr(value, "code", None)
    if code is None or not hasattr(value, "code_type"):
        raise TypeError(f"cache values must be bytes-like or an ObjectCode, got {type(value).__name__}")
    if isinstance(code, (str, os.PathLike)):
        with open(code, "rb") as file:
            code = file.read()
    code_type = value.code_type
    return (bytes(code), code_type if code_type in CODE_TYPES else None, getattr(value, "name", "") or "",
            dict(getattr(value, "symbol_mapping", None) or {}))


def _key_bytes(key):
    """cuda.core's keys: bytes, or a str as UTF-8 ("k" and b"k" are one key, as cuda.core has it)."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode()
    raise TypeError(f"cache keys must be bytes or str, got {type(key).__name__}")


class ProgramCacheMethods:
    """A cuda.core program cache (ProgramCacheResource) kept in kiln's disk cache:

        import kiln.cuda_core
        cache = kiln.cuda_core.ProgramCache()                 # or ProgramCache("/path", max_size=2 << 30)
        object_code = program.compile("cubin", cache=cache)   # a hit in every later process
        cache.stats()                                         # {"hits": ..., "misses": ..., ...}

    A mapping from cuda.core's keys (bytes, or str as UTF-8) to the compiled code's bytes: get(key) /
    cache[key] return the bytes (KeyError when absent), cache[key] = ObjectCode or bytes stores, del,
    `in`, len() and clear() cover this cache's namespace in the local folder; update(); close() (also as a
    context manager); stats(); get_object_code(key) rebuilds the ObjectCode with its name and
    symbol_mapping.

    The class (kiln.cuda_core.ProgramCache) is made with cuda.core's ProgramCacheResource as its base when
    cuda.core is importable, so that cuda.core's isinstance checks hold, and without it otherwise."""

    def __init__(self, cache_dir=None, max_size=None, namespace=NAMESPACE):
        """cache_dir: kiln's cache folder (None: KILN_CACHE_DIR, else kiln's default cache); max_size: its
        size cap in bytes (None: KILN_CACHE_MAXSIZE, else 4 GiB; it caps the whole folder, kiln's other
        entries included); namespace: a non-empty str naming this cache's entries in that folder (caches
        with different namespaces share the folder without seeing each other's entries)."""
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
        encoded = namespace.encode(errors="surrogatepass")
        if not encoded or len(encoded) > _native.BLOB_MAX_NAMESPACE or "\0" in namespace:
            raise ValueError(f"namespace must be 1 to {_native.BLOB_MAX_NAMESPACE} bytes of UTF-8 without a NUL byte, "
                             f"got {namespace!r}")
        _native.require(_native.BLOB_API_VERSION, "kiln.cuda_core.ProgramCache (kiln_blob_*)")
        self._lock = threading.Lock()
        self._engine = _api.Engine(cache_dir=cache_dir, cache_max_size=max_size)
        self.namespace = namespace
        self.cache_dir = cache_dir
        self._counts = dict.fromkeys(("get_hits", "get_misses", "stores", "not_stored", "undecodable",
                                      "routed_hits", "routed_misses"), 0)

    # --- what cuda.core calls ---------------------------------------------------------------------

    def __getitem__(self, key):
        record = self._lookup(key)
        if record is None:
            raise KeyError(key)
        return record.code

    def get(self, key, default=None):
        """The code's bytes stored under `key`, else `default` (one lookup: no race between a check and a
        read)."""
        record = self._lookup(key)
        return default if record is None else record.code

    def __setitem__(self, key, value):
        raw = _key_bytes(key)
        data = encode(*_from_value(value))
        stored = self.engine.blob_put(self.namespace, raw, data)
        self._count("stores" if stored else "not_stored")

    def __delitem__(self, key):
        """Removes the entry (and the remote cache's copy); KeyError when this cache's folder holds none."""
        if not self.engine.blob_remove(self.namespace, _key_bytes(key)):
            raise KeyError(key)

    def __contains__(self, key):
        """Whether `key` is stored (read and verified; not counted in stats()). Prefer get(): between a
        check and a later read another process or an eviction may remove the entry."""
        return self._lookup(key, count=False) is not None

    def __len__(self):
        """The entries of this namespace in the local cache folder (packs and the remote are not counted)."""
        return self.engine.blob_count(self.namespace)

    def clear(self):
        """Removes every entry of this namespace from the local cache folder (other namespaces and kiln's
        compiled kernels stay)."""
        self.engine.blob_clear(self.namespace)

    def update(self, items, /):
        """cache[key] = value for each pair of a mapping or an iterable of (key, value)."""
        if isinstance(items, collections.abc.Mapping):
            items = items.items()
        for key, value in items:
            self[key] = value

    def close(self):
        """Releases the kiln engine; the cache cannot be used afterwards (its entries stay on disk)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- kiln's additions -------------------------------------------------------------------------

    @property
    def engine(self):
        """The kiln.Engine over this cache's folder (kiln.cuda_core's routed compiles use it)."""
        if self._engine is None:
            raise ValueError("this kiln.cuda_core.ProgramCache is closed")
        return self._engine

    def get_object_code(self, key, default=None, *, code_type=None):
        """The ObjectCode stored under `key`, rebuilt with its code type, name and symbol_mapping (so
        get_kernel(name_expression) works), or `default`. A value stored as bare bytes has no code type:
        pass `code_type` ("cubin", "ptx", ...) for it. Needs cuda.core."""
        record = self._lookup(key)
        if record is None:
            return default
        kind = record.code_type or code_type
        if kind not in CODE_TYPES:
            raise ValueError(f"the value under this key was stored as bare bytes: pass code_type (one of "
                             f"{', '.join(CODE_TYPES)}) to rebuild an ObjectCode, not {code_type!r}")
        object_code = _object_code_class()
        make = getattr(object_code, f"from_{kind}", None)
        if make is not None:
            return make(record.code, name=record.name, symbol_mapping=record.symbol_mapping)
        return object_code._init(record.code, kind, name=record.name, symbol_mapping=record.symbol_mapping)

    def stats(self):
        """What this cache did since it was made: `hits` and `misses` (lookups through get()/[] plus the
        compiles kiln.cuda_core served for a Program.compile(..., cache=this)), those split into
        get_hits/get_misses and routed_hits/routed_misses (a routed miss is a compile), `stores` (values
        written), `not_stored` (values the cache folder did not take: read-only, disabled, or a failed
        write), `undecodable` (values that were not in kiln.cuda_core's format: removed, answered as misses),
        and from the kiln engine: corrupt_removed (entries whose checksum failed: removed), evictions (by the
        size cap) and bytes_written."""
        with self._lock:
            result = dict(self._counts)
        result["hits"] = result["get_hits"] + result["routed_hits"]
        result["misses"] = result["get_misses"] + result["routed_misses"]
        engine = self.engine.stats()
        for name in ("corrupt_removed", "evictions", "bytes_written"):
            result[name] = engine[name]
        return result

    def __repr__(self):
        where = self.cache_dir if self.cache_dir is not None else "the default kiln cache"
        return f"kiln.cuda_core.ProgramCache({where!r}, namespace={self.namespace!r})"

    # --- inside -----------------------------------------------------------------------------------

    def _count(self, name, amount=1):
        with self._lock:
            self._counts[name] += amount

    def _note_routed(self, origin):
        """A compile kiln.cuda_core served with this cache's engine: from any cache tier (a hit) or
        compiled (a miss)."""
        self._count("routed_misses" if origin == "compiled" else "routed_hits")

    def _lookup(self, key, count=True):
        raw = _key_bytes(key)
        data = self.engine.blob_get(self.namespace, raw)
        record = None
        if data is not None:
            try:
                record = decode(data)
            except ValueFormatError:
                # Not ours to read (another format, a foreign writer): a miss, and removed so that the
                # compile that follows stores a value every reader can use.
                self.engine.blob_remove(self.namespace, raw)
                self._count("undecodable")
        if count:
            self._count("get_hits" if record is not None else "get_misses")
        return record


_classes = {}  # cuda.core's ProgramCacheResource (or None) -> the ProgramCache class made with it


def _resource_base():
    """cuda.core.utils.ProgramCacheResource, or None where cuda.core (or that class) is not importable."""
    try:
        from cuda.core.utils import ProgramCacheResource
    except ImportError:
        return None
    return ProgramCacheResource if isinstance(ProgramCacheResource, type) else None


def program_cache_class():
    """kiln.cuda_core.ProgramCache: ProgramCacheMethods over cuda.core's ProgramCacheResource when there is
    one. Made once per base class (a test that imports a fresh stand-in gets a class of its own). Raises
    kiln.Error naming the abstract methods cuda.core's base declares and this class lacks (a cuda.core
    whose ProgramCacheResource asks for more than 1.2's)."""
    base = _resource_base()
    found = _classes.get(base)
    if found is None:
        bases = (ProgramCacheMethods,) if base is None else (ProgramCacheMethods, base)
        metaclass = type if base is None else type(base)  # abc.ABCMeta: it works out the abstract methods left
        found = metaclass("ProgramCache", bases, {"__doc__": ProgramCacheMethods.__doc__, "__module__": __name__,
                                                  "__qualname__": "ProgramCache"})
        missing = sorted(getattr(found, "__abstractmethods__", ()))
        if missing:
            raise Error(f"kiln.cuda_core.ProgramCache: cuda.core's ProgramCacheResource declares abstract methods "
                        f"kiln does not implement ({', '.join(missing)}); this cuda.core is not the one kiln was "
                        "written for")
        _classes[base] = found
    return found
