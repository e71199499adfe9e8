"""The objects of the kiln package: Engine, Source, Program, Kernel and Binary."""

import atexit
import collections.abc
import ctypes
import operator
import os
import threading

from . import _native
from ._native import H, c_string, check, sized, strings

f32, f64 = ctypes.c_float, ctypes.c_double
i32, u32, i64, u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
ptr = ctypes.c_void_p


def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    for attribute in ("ptr", "cuda_stream", "handle"):  # CuPy, PyTorch, generic
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value or None
    raise TypeError(f"cannot use {type(stream).__name__} as a stream: pass an int handle, a CuPy or a PyTorch stream")


def _argument(value):
    """A ctypes object holding the argument's bytes."""
    if isinstance(value, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return value
    if hasattr(value, "data_ptr") and callable(value.data_ptr):  # torch.Tensor
        return ctypes.c_void_p(value.data_ptr())
    data = getattr(value, "data", None)
    if data is not None and isinstance(getattr(data, "ptr", None), int):  # cupy.ndarray
        return ctypes.c_void_p(data.ptr)
    if hasattr(value, "dtype") and hasattr(value, "tobytes") and getattr(value, "shape", None) == ():  # NumPy scalar
        raw = value.tobytes()
        return (ctypes.c_char * len(raw)).from_buffer_copy(raw)
    if isinstance(value, (bool, int, float)):
        raise TypeError(f"a bare Python {type(value).__name__} ({value!r}) has no C width: wrap it, e.g. kiln.f32(x), "
                        "kiln.u32(n) or numpy.float32(x)")
    raise TypeError(f"cannot pass {type(value).__name__} as a kernel argument")


def _dim3(value, what):
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} needs 1 to 3 dimensions, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def _text(value):
    return value.decode(errors="replace") if value is not None else ""


def _target(target):
    """The C string of a `target` argument. None means "native" (the engine's device), as the C API reads
    NULL in kiln_compile; it is passed as "native", never as NULL. An empty string is refused: it names
    no target (and used to turn into NULL here, that is "native", without a word)."""
    if target is None:
        return b"native"
    if isinstance(target, str) and not target:
        raise ValueError("target is empty: name one (\"sm_90\", \"compute_90\" for PTX, \"gfx90a\") or \"native\" for "
                         "the engine's device")
    return c_string(target, "target")


def _source_name(name, text=None):
    """The C string of a source's `name`: a non-empty str of one line. `text`, when given, is the text it
    came with: a name that is a source and a text that is a file name are the C++ order, refused."""
    if isinstance(name, str) and not name:
        raise ValueError("name is empty: a source's name is the compiler's file name (in its messages and in "
                         "__FILE__) and part of the cache key; give one, e.g. \"kernels.cu\" (the default is "
                         "\"source.cu\")")
    if isinstance(name, str) and "\n" in name:
        swapped = isinstance(text, str) and "\n" not in text and len(text) < 256
        raise ValueError("name holds a line break: a source's name is the compiler's file name"
                         + (f"; this looks like the source text, and text ({text!r}) like its name. In Python the "
                            "text comes first: Source.from_text(text, name=\"my.cu\", headers={...}) (C++ and C "
                            "take the name first)" if swapped else ""))
    return c_string(name, "name")


def _headers(headers):
    """(kiln_header[], count, the bytes they point to) of a {include name: header text} dict (None: none)."""
    if headers is None:
        return None, 0, ()
    if not isinstance(headers, collections.abc.Mapping):
        raise TypeError(f"headers must be a dict of str (include name) to str (header text), got "
                        f"{type(headers).__name__}")
    kept = []
    for key, value in headers.items():
        if not isinstance(key, str):
            raise TypeError(f"headers: an include name must be a str, got {type(key).__name__} ({key!r})")
        kept.append((c_string(key, f"headers: the include name {key!r}"), c_string(value, f"headers[{key!r}]")))
    if not kept:
        return None, 0, ()
    array = (_native.Header * len(kept))(*[_native.Header(name, text) for name, text in kept])
    return array, len(kept), kept


def _cache_dir(cache_dir):
    """The C string of Engine's `cache_dir`: None (NULL: the environment's) or a non-empty folder path."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, bytes, os.PathLike)):
        raise TypeError(f"cache_dir must be a folder path (str, bytes or os.PathLike), or None for the "
                        f"environment's (KILN_CACHE_DIR, else the default), got {type(cache_dir).__name__} "
                        f"({cache_dir!r})")
    path = os.fsencode(cache_dir)
    if not path:
        raise ValueError("cache_dir is empty: refused, as the CLI and KILN_CACHE_DIR refuse it (it is never taken "
                         "for the default cache); pass None for the environment's cache (KILN_CACHE_DIR, else "
                         "the default)")
    if b"\0" in path:
        raise ValueError(f"cache_dir holds a NUL byte ({cache_dir!r}): a C string ends there, so kiln would get "
                         "another folder")
    return path


def _cache_max_size(value):
    """Engine's `cache_max_size` as kiln_engine_config.cache_max_size (0: the environment's)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("cache_max_size must be a size in bytes (an int), not a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"cache_max_size must be a size in bytes (an int) or None, got {type(value).__name__}") from None
    if value <= 0 or value >= 1 << 64:
        raise ValueError(f"cache_max_size must be a positive number of bytes, not {value}")
    return value


def _bytes_like(value, what):
    """bytes of a bytes-like `value` (bytes, bytearray, memoryview or another buffer); TypeError otherwise."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        raise TypeError(f"{what} must be bytes-like, not str")
    try:
        return memoryview(value).tobytes()
    except TypeError:
        raise TypeError(f"{what} must be bytes-like (bytes, bytearray, memoryview), got {type(value).__name__}") from None


def _blob_namespace(namespace):
    """The C string of a blob namespace: a non-empty str (kiln's limits are checked by kiln)."""
    return c_string(namespace, "namespace")


def _blob_key(key):
    """A blob key's bytes: bytes-like, or a str as UTF-8 (so "k" and b"k" name one entry)."""
    if isinstance(key, str):
        try:
            return key.encode()
        except UnicodeEncodeError as error:
            raise ValueError(f"key cannot be encoded as UTF-8: {error}") from None
    return _bytes_like(key, "key")


def _blob_labels(labels):
    """(kiln_blob_label[], the bytes it points to) of a {name: value} dict of str."""
    if not isinstance(labels, collections.abc.Mapping):
        raise TypeError(f"labels must be a dict of str (name) to str (value), got {type(labels).__name__}")
    kept = [(c_string(name, "a label's name"), c_string(value, f"labels[{name!r}]")) for name, value in labels.items()]
    array = (_native.BlobLabel * len(kept))(*[_native.BlobLabel(name, value) for name, value in kept])
    return array, kept


class _Handle:
    """Owns one C handle; destroyed by close(), `with`, or garbage collection."""
    _destroy = None

    def __init__(self, handle):
        self._handle = handle

    def close(self):
        """Destroys the handle now (it is also destroyed when garbage collected)."""
        handle, self._handle = getattr(self, "_handle", None), None
        # At interpreter exit the module's globals may already be gone: then the process is ending and
        # the library releases everything with it.
        loaded = getattr(_native, "_loaded", None) if _native is not None else None
        if handle and loaded is not None:
            getattr(loaded[0], self._destroy)(handle)  # an error here (engine already gone) changes nothing

    def __del__(self):
        try:
            self.close()
        except Exception:  # a destructor must not raise (and at exit there is nobody to tell)
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Source(_Handle):
    """A kernel source: text with in-memory headers, or a built-in by name. Independent of engines."""
    _destroy = "kiln_source_destroy"

    @classmethod
    def from_text(cls, text, name="source.cu", headers=None):
        """A source from its text (a str): `Source.from_text(text, name="my.cu", headers={"my.h": h})`.
        The text comes first (C++'s Source::from_text and C's kiln_source_from_text take the name first);
        swapped, the name would hold line breaks, which is refused (ValueError) rather than compiled.

        `name`: the compiler's file name, a non-empty str (in its messages and in `__FILE__`; part of the
        cache key). `headers`: a dict {include name: header text} of str to str (None: none), what
        `#include "name"` resolves to before any -I folder.

        Text, name and headers are str only; bytes are refused (TypeError) here as everywhere in the
        package: decode them first. TypeError for a wrong type; ValueError for an empty name or a string
        holding a NUL byte (kiln reads C strings: the text after it would be lost); kiln.ConfigError for
        an empty text."""
        name = _source_name(name, text)
        text = c_string(text, "text")
        array, count, _kept = _headers(headers)  # _kept: the bytes the array points to, alive until the call returns
        handle = H()
        check(_native.lib().kiln_source_from_text(name, text, array, count, ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def builtin(cls, name):
        """A source embedded in libkiln, e.g. "saxpy" (see builtin_names()); `name` is a str."""
        handle = H()
        check(_native.lib().kiln_source_builtin(c_string(name, "name"), ctypes.byref(handle)))
        return cls(handle.value)

    @staticmethod
    def builtin_names():
        library = _native.lib()
        count = ctypes.c_size_t()
        check(library.kiln_builtin_source_name(0, ctypes.byref(count), None))
        names = []
        for index in range(count.value):
            name = ctypes.c_char_p()
            check(library.kiln_builtin_source_name(index, None, ctypes.byref(name)))
            names.append(name.value.decode())
        return names


def _as_source(source):
    if isinstance(source, Source):
        return source
    if isinstance(source, str):
        return Source.from_text(source)
    raise TypeError(f"source must be a kiln.Source or the source text (a str; decode bytes first), got "
                    f"{type(source).__name__}")


class Kernel(_Handle):
    """A launchable kernel. Call it: kernel(grid, block, args, shared=0, stream=None)."""
    _destroy = "kiln_kernel_destroy"

    def __init__(self, handle, engine):
        super().__init__(handle)
        self._engine = engine  # keeps the engine alive as long as its kernels

    def info(self):
        info = sized(_native.KernelInfo)
        check(_native.lib().kiln_kernel_get_info(self._handle, ctypes.byref(info)))
        return {"name": _text(info.name), "lowered_name": _text(info.lowered_name), "device": info.device,
                "max_threads_per_block": info.max_threads_per_block,
                "param_count": None if info.param_count < 0 else info.param_count}

    def __call__(self, grid, block, args, shared=0, stream=None):
        """Queues a launch on `stream` (asynchronous). Arguments are checked against the binary.

        CuPy arrays and PyTorch tensors pass as device pointers; ctypes values (kiln.f32, kiln.u32, ...)
        and NumPy scalars by value. A bare Python int or float is refused: its C width would be a guess.
        """
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        held = [_argument(a) for a in args]  # kept alive until the call returns
        pointers = (ctypes.c_void_p * len(held))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
        sizes = (ctypes.c_size_t * len(held))(*[ctypes.sizeof(h) for h in held])
        check(_native.lib().kiln_kernel_launch(self._handle, *grid, *block, shared, _stream_handle(stream),
                                               pointers if held else None, sizes if held else None, len(held)))


class Program(_Handle):
    """A compiled module on one device; kernels by name or name expression."""
    _destroy = "kiln_program_destroy"

    def __init__(self, handle, engine):
        super().__init__(handle)
        self._engine = engine

    def info(self):
        library = _native.lib()
        info = sized(_native.ProgramInfo)
        check(library.kiln_program_get_info(self._handle, ctypes.byref(info)))
        names = []
        for i in range(info.kernel_count):
            name = ctypes.c_char_p()
            check(library.kiln_program_kernel_name(self._handle, i, ctypes.byref(name)))
            names.append(_text(name.value))
        return {"key": _text(info.key), "target": _text(info.target), "device": info.device,
                "origin": _native.ORIGINS.get(info.origin, "?"), "kernels": names}

    def kernel(self, name):
        """A kernel of the program by plain name or name expression (a str)."""
        handle = H()
        check(_native.lib().kiln_program_get_kernel(self._handle, c_string(name, "name"), ctypes.byref(handle)))
        return Kernel(handle.value, self._engine)


class Binary:
    """A compiled binary, not loaded (Engine.compile): for runtimes that load modules themselves.

    data           the bytes (bytes): a CUBIN, PTX text (not NUL-terminated), an AMD code object or
                   NVIDIA LTO-IR (for a link step, e.g. nvJitLink; kiln never loads it)
    kind           "cubin", "ptx", "amd_code_object" or "ltoir" (an "lto_90" target; libkiln API 5)
    target         the resolved target, e.g. "sm_90"
    key            the cache key, 32 hex digits
    origin         "memory", "disk", "pack", "remote" or "compiled"
    lowered_names  {name expression: symbol in the binary}
    log            the compiler's log when this call compiled ("" from any cache)
    seconds        the time the compile call took
    """

    __slots__ = ("data", "kind", "target", "key", "origin", "lowered_names", "log", "seconds")

    def __init__(self, data, kind, target, key, origin, lowered_names, log, seconds):
        self.data = data
        self.kind = kind
        self.target = target
        self.key = key
        self.origin = origin
        self.lowered_names = lowered_names
        self.log = log
        self.seconds = seconds

    def __repr__(self):
        return (f"kiln.Binary({self.kind}, {len(self.data)} bytes, target={self.target}, key={self.key}, "
                f"origin={self.origin}, names={len(self.lowered_names)})")


def _read_binary(library, handle):
    info = sized(_native.BinaryInfo)
    check(library.kiln_binary_get_info(handle, ctypes.byref(info)))
    data = ctypes.string_at(info.data, info.data_size) if info.data_size else b""
    lowered = {}
    for index in range(info.name_count):
        expression, symbol = ctypes.c_char_p(), ctypes.c_char_p()
        check(library.kiln_binary_name(handle, index, ctypes.byref(expression), ctypes.byref(symbol)))
        lowered[_text(expression.value)] = _text(symbol.value)
    origin = _native.ORIGINS.get(info.origin, f"unknown ({info.origin})")
    log = ""
    if origin == "compiled":  # (kiln_binary_log is empty for a binary from any cache: one call saved)
        text = ctypes.c_char_p()
        check(library.kiln_binary_log(handle, ctypes.byref(text)))
        log = _text(text.value)
    return Binary(data, _native.BINARY_KINDS.get(info.kind, f"unknown ({info.kind})"), _text(info.target),
                  _text(info.key), origin, lowered, log, info.seconds)


_encoded_options = {}  # tuple of option strings -> strings(...) of them: a runtime repeats a few option sets


def _option_strings(options):
    """strings(options, "options"), kept for option sets seen before (the C side only reads them)."""
    if isinstance(options, str):
        key = (options,)
    elif isinstance(options, (tuple, list)):
        key = tuple(options)
    else:  # None, another iterable, or what is no sequence of str: strings() reads it or says what is wrong
        return strings(options, "options")
    try:
        found = _encoded_options.get(key)
    except TypeError:  # an unhashable item: strings() says what is wrong with it
        return strings(options, "options")
    if found is None:
        found = strings(key, "options")
        if len(_encoded_options) < 64:
            _encoded_options[key] = found
    return found


class Engine(_Handle):
    """A kiln engine: one vendor lane, a device, the disk cache. Settings default to the environment
    (KILN_VENDOR, KILN_DEVICE, KILN_CACHE_DIR, KILN_CACHE_*, KILN_CACHE_PACKS, KILN_REMOTE_CACHE, ...).
    An engine is created without a GPU too: it compiles and prewarms for named targets.

    vendor     None or "auto" (KILN_VENDOR, else the first lane with a device), "cuda" or "hip"
    device     the default device ordinal; -1: KILN_DEVICE, else 0
    cache_dir  the disk cache's folder (a path: str, bytes or os.PathLike); None: KILN_CACHE_DIR, else
               the default cache. An empty path is refused (ValueError), never taken for the default.
    cache_max_size  the disk cache's size cap in bytes (an int > 0; least recently used entries go first);
               None: KILN_CACHE_MAXSIZE, else 4 GiB
    runtime    False: load no GPU runtime (no driver, no device: compiles for named targets and blobs only;
               libkiln API 7), for a process that keeps a cache and must not initialise CUDA

    Text arguments of the engine's methods (options, names, targets, source text) are str only, bytes
    refused (TypeError); a str holding a NUL byte is refused (ValueError), as kiln reads C strings."""
    _destroy = "kiln_engine_destroy"

    def __init__(self, vendor=None, device=-1, cache_dir=None, cache_disable=False, cache_readonly=False,
                 cache_max_size=None, runtime=True):
        if vendor is not None and not isinstance(vendor, str):
            raise TypeError(f"vendor must be None or a str ('auto', 'cuda' or 'hip'), got {type(vendor).__name__}")
        if vendor not in _native.VENDORS:
            raise ValueError(f"vendor must be None, 'auto', 'cuda' or 'hip', not {vendor!r}")
        try:
            device = operator.index(device)
        except TypeError:
            raise TypeError(f"device must be an int (-1: KILN_DEVICE, else 0), got {type(device).__name__}") from None
        cache_path = _cache_dir(cache_dir)
        max_size = _cache_max_size(cache_max_size)
        library = _native.lib() if runtime else _native.require(_native.LABEL_API_VERSION,
                                                                "kiln.Engine(runtime=False) (KILN_ENGINE_NO_RUNTIME)")
        config = sized(_native.EngineConfig)
        config.vendor = _native.VENDORS[vendor]
        config.device = device
        config.cache_dir = cache_path
        config.flags = ((_native.ENGINE_CACHE_DISABLE if cache_disable else 0)
                        | (_native.ENGINE_CACHE_READONLY if cache_readonly else 0)
                        | (0 if runtime else _native.ENGINE_NO_RUNTIME))
        config.cache_max_size = max_size
        handle = H()
        check(library.kiln_engine_create(ctypes.byref(config), ctypes.byref(handle)))
        super().__init__(handle.value)

    @property
    def vendor(self):
        """"cuda", "hip", or None without a device."""
        value = ctypes.c_int()
        check(_native.lib().kiln_engine_vendor(self._handle, ctypes.byref(value)))
        return _native.VENDOR_NAMES.get(value.value)

    def devices(self):
        """[info dict] of the engine's lane, one per device; empty without a GPU."""
        library = _native.lib()
        count, default = ctypes.c_int(), ctypes.c_int()
        check(library.kiln_engine_device_count(self._handle, ctypes.byref(count), ctypes.byref(default)))
        result = []
        for ordinal in range(count.value):
            info = sized(_native.DeviceInfo)
            check(library.kiln_engine_device_info(self._handle, ordinal, ctypes.byref(info)))
            result.append({"ordinal": info.ordinal, "name": _text(info.name), "target": _text(info.target),
                           "warp_size": info.warp_size, "multiprocessors": info.multiprocessors,
                           "total_memory": info.total_memory, "default": ordinal == default.value})
        return result

    def stats(self):
        """The engine's counters since it was created: memory_hits, disk_hits, misses, compiles, ..."""
        stats = sized(_native.Stats)
        check(_native.lib().kiln_engine_stats(self._handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name in _native.STAT_NAMES}

    def record_stats(self):
        """Adds the engine's counters since it was created, or since its last record, to the cache's lifetime
        counters (`kiln cache stats`); close() records the rest, so nothing counts twice. The default engine
        does this at interpreter exit, where it is not closed."""
        library = _native.require(_native.RECORD_API_VERSION, "kiln.Engine.record_stats (kiln_engine_record_stats)")
        check(library.kiln_engine_record_stats(self._handle))

    def program(self, source, options=(), names=(), device=-1):
        """Compiles (or finds in the cache) and loads a module on `device` (-1: the default)."""
        source = _as_source(source)
        opts, nopts = strings(options, "options")
        exprs, nexprs = strings(names, "names")
        handle = H()
        check(_native.lib().kiln_program_create(self._handle, source._handle, opts, nopts, exprs, nexprs, device,
                                                ctypes.byref(handle)))
        return Program(handle.value, self)

    def kernel(self, source, name, options=(), device=-1):
        """Compiles (or finds in the cache) and loads one kernel: `name` (a str) is a plain name or a name
        expression."""
        source = _as_source(source)
        name = c_string(name, "name")
        opts, nopts = strings(options, "options")
        handle = H()
        check(_native.lib().kiln_kernel_get(self._handle, source._handle, name, opts, nopts, device,
                                            ctypes.byref(handle)))
        return Kernel(handle.value, self)

    def prewarm(self, source, target, options=(), names=()):
        """Compiles into the disk cache for a named target ("sm_90", "gfx90a"); needs no GPU. `target`:
        a str, or "native" (None means "native" too) for the engine's device; an empty string is a
        ValueError. `options`, `names`: a str (one item) or a sequence of str."""
        source = _as_source(source)
        target = _target(target)
        opts, nopts = strings(options, "options")
        exprs, nexprs = strings(names, "names")
        result = sized(_native.PrewarmResult)
        check(_native.lib().kiln_prewarm(self._handle, source._handle, opts, nopts, exprs, nexprs, target,
                                         ctypes.byref(result)))
        return {"key": _text(result.key), "target": _text(result.target),
                "origin": _native.ORIGINS.get(result.origin, "?"), "seconds": result.seconds,
                "binary_bytes": result.binary_bytes, "stored": bool(result.stored)}

    def compile(self, source, options=(), names=(), target="native"):
        """Compiles (or finds: engine memory, disk cache, packs, remote) a source's binary for `target`
        ("sm_90", "compute_90" for PTX, "lto_90" for LTO-IR, "gfx90a", or "native" for the engine's
        device; None means "native" too, an empty string is a ValueError) and returns it as a kiln.Binary
        without loading it. Needs no GPU for a named target. `source`: a kiln.Source or the text (a str, compiled as a
        source named "source.cu"). `options`: a str (one option) or a sequence of str. `names`: name
        expressions (e.g. "scale<float>"), a str or a sequence of str, whose symbols come back in
        Binary.lowered_names."""
        library = _native.require(_native.COMPILE_API_VERSION, "kiln.Engine.compile (kiln_compile)")
        if isinstance(source, str):
            return self._compile_text(library, "source.cu", source, options, names, target)
        return self._compile_source(library, _as_source(source)._handle, options, names, target)

    def _compile_text(self, library, name, text, options, names, target):
        """compile() of source text named `name`: its C source lives for this call only (no Source object:
        a runtime that hands over a new text per kernel pays for one C source, nothing more)."""
        name, text = _source_name(name), c_string(text, "source")
        source = H()
        check(library.kiln_source_from_text(name, text, None, 0, ctypes.byref(source)))
        try:
            return self._compile_source(library, source, options, names, target)
        finally:
            library.kiln_source_destroy(source)

    def _compile_source(self, library, source, options, names, target):
        target = _target(target)
        opts, nopts = _option_strings(options)
        exprs, nexprs = strings(names, "names")
        handle = H()
        check(library.kiln_compile(self._handle, source, opts, nopts, exprs, nexprs, target, ctypes.byref(handle)))
        try:
            return _read_binary(library, handle.value)
        finally:
            library.kiln_binary_destroy(handle.value)

    def synchronize(self, stream=None, device=-1):
        check(_native.lib().kiln_synchronize(self._handle, _stream_handle(stream), device))

    # Entries under a caller's key (libkiln API 6): bytes stored in this engine's disk cache under a
    # (namespace, key) of the caller's, with every check a cache entry gets (checksum on each read, the
    # size cap, packs and the remote tier). `namespace`: a non-empty str; `key`: bytes-like or a str
    # (UTF-8: "k" and b"k" are one key).

    def blob_put(self, namespace, key, data, labels=None):
        """Stores `data` (bytes-like) under (`namespace`, `key`), replacing what was there, and offers it
        to the remote cache. True when the local disk cache took it (False: read-only, disabled, or the
        write failed; never an error). `labels`: a dict {name: value} of str (libkiln API 7) that `kiln
        cache ls/show/stats` show beside the entry ("target", "kernel" and "file" have columns; see
        kiln.h), not part of the key; None or empty: none."""
        space, raw = _blob_namespace(namespace), _blob_key(key)
        value = _bytes_like(data, "data")
        stored = ctypes.c_int()
        if labels:
            library = _native.require(_native.LABEL_API_VERSION, "kiln.Engine.blob_put(labels=...) "
                                                                  "(kiln_blob_put_labeled)")
            array, _kept = _blob_labels(labels)  # _kept: the bytes the array points to, alive for the call
            check(library.kiln_blob_put_labeled(self._handle, space, raw or None, len(raw), value or None, len(value),
                                                array, len(array), ctypes.byref(stored)))
        else:
            library = _native.require(_native.BLOB_API_VERSION, "kiln.Engine.blob_put (kiln_blob_put)")
            check(library.kiln_blob_put(self._handle, space, raw or None, len(raw), value or None, len(value),
                                        ctypes.byref(stored)))
        return bool(stored.value)

    def blob_get(self, namespace, key):
        """The bytes under (`namespace`, `key`): the local disk cache, then packs and the remote; None on
        a miss (also when what was stored was damaged: kiln removed it)."""
        found = self.blob_find(namespace, key)
        return None if found is None else found[0]

    def blob_find(self, namespace, key):
        """blob_get, with where the bytes were found: (bytes, origin) with origin "disk" (the local
        cache), "pack" or "remote"; None on a miss."""
        library = _native.require(_native.BLOB_API_VERSION, "kiln.Engine.blob_get (kiln_blob_get)")
        space, raw = _blob_namespace(namespace), _blob_key(key)
        handle = H()
        check(library.kiln_blob_get(self._handle, space, raw or None, len(raw), ctypes.byref(handle)))
        if not handle.value:
            return None
        try:
            data, size, origin = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_int()
            check(library.kiln_blob_data(handle, ctypes.byref(data), ctypes.byref(size), ctypes.byref(origin)))
            return (ctypes.string_at(data.value, size.value) if size.value else b"",
                    _native.ORIGINS.get(origin.value, f"unknown ({origin.value})"))
        finally:
            library.kiln_blob_destroy(handle)

    def blob_remove(self, namespace, key):
        """Removes the entry under (`namespace`, `key`) (and the remote cache's copy); True when a local
        entry was removed."""
        library = _native.require(_native.BLOB_API_VERSION, "kiln.Engine.blob_remove (kiln_blob_remove)")
        space, raw = _blob_namespace(namespace), _blob_key(key)
        removed = ctypes.c_int()
        check(library.kiln_blob_remove(self._handle, space, raw or None, len(raw), ctypes.byref(removed)))
        return bool(removed.value)

    def blob_count(self, namespace):
        """The number of entries of `namespace` in the local disk cache."""
        library = _native.require(_native.BLOB_API_VERSION, "kiln.Engine.blob_count (kiln_blob_count)")
        count = ctypes.c_uint64()
        check(library.kiln_blob_count(self._handle, _blob_namespace(namespace), ctypes.byref(count)))
        return count.value

    def blob_clear(self, namespace):
        """Removes every entry of `namespace` from the local disk cache; returns how many."""
        library = _native.require(_native.BLOB_API_VERSION, "kiln.Engine.blob_clear (kiln_blob_clear)")
        removed = ctypes.c_uint64()
        check(library.kiln_blob_clear(self._handle, _blob_namespace(namespace), ctypes.byref(removed)))
        return removed.value


_default_lock = threading.Lock()
_default = None


def default_engine():
    """The process's shared engine (created on first use, settings from the environment); kiln.compile,
    kiln.prewarm, kiln.stats and kiln.cupy use it."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Engine()
    return _default


@atexit.register
def _record_default_stats():
    # In a large program the default engine is not destroyed at exit (when it is collected, close() finds the
    # module state it needs gone), so what it counted would never reach `kiln cache stats`'s lifetime counters:
    # record it here, before any teardown. A later destroy adds only what came after. Nothing to say on failure
    # (an older libkiln without the call, an engine closed by hand): the process is ending.
    engine = _default
    if engine is not None and getattr(engine, "_handle", None):
        try:
            engine.record_stats()
        except Exception:
            pass


def compile(source, options=(), names=(), target="native"):  # noqa: A001 (kiln.compile is the API's name)
    """Engine.compile on the default engine."""
    return default_engine().compile(source, options, names, target)


def prewarm(source, target, options=(), names=()):
    """Engine.prewarm on the default engine."""
    return default_engine().prewarm(source, target, options, names)


def stats():
    """Engine.stats of the default engine."""
    return default_engine().stats()
