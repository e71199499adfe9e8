"""kiln over its C API with ctypes: compile GPU kernels at run time and launch them on CuPy arrays,
PyTorch tensors or raw device pointers. No build step: this file and libkiln.so are all it needs.

libkiln.so is found through, in order: the KILN_LIBRARY environment variable (a file path); a build
tree of this repository (../../build*/engine/libkiln.so, newest first); the system's library path.

    import kiln
    engine = kiln.Engine()
    source = kiln.Source.from_text(KERNEL_TEXT, name="saxpy.cu")
    kernel = engine.kernel(source, "saxpy")
    kernel((blocks,), (256,), [kiln.f32(2.0), x, y, kiln.u32(n)], stream=stream_ptr)

Kernel arguments: CuPy arrays (their `.data.ptr`) and PyTorch tensors (`.data_ptr()`) pass as device
pointers; ctypes values (kiln.f32/f64/i32/u32/i64/u64/ptr, or any ctypes scalar or Structure) and
NumPy scalars pass by value. A bare Python int or float is refused: its C width would be a guess.
Streams: an int handle, None (the legacy default stream), a CuPy stream (`.ptr`) or a PyTorch stream
(`.cuda_stream`).
"""

import ctypes
import ctypes.util
import glob
import os

__all__ = ["KilnError", "Engine", "Source", "Program", "Kernel", "library_path",
           "f32", "f64", "i32", "u32", "i64", "u64", "ptr"]

f32, f64 = ctypes.c_float, ctypes.c_double
i32, u32, i64, u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
ptr = ctypes.c_void_p

API_VERSION = 1  # KILN_API_VERSION of the kiln.h this file mirrors

_ENGINE_CACHE_DISABLE = 0x1
_ENGINE_CACHE_READONLY = 0x2
_VENDORS = {None: 0, "auto": 0, "cuda": 1, "hip": 2}
_VENDOR_NAMES = {0: None, 1: "cuda", 2: "hip"}
_ORIGINS = {0: "memory", 1: "disk", 2: "compiled"}


class KilnError(RuntimeError):
    """A kiln call failed. `status` is the KILN_ERROR_* name, `log` the compiler log (compile errors)."""

    def __init__(self, status, message, log=""):
        super().__init__(f"{status}: {message}" + (f"\n--- compiler log ---\n{log}" if log else ""))
        self.status = status
        self.message = message
        self.log = log


# --- the C structs (mirrors of kiln.h; each starts with its size) --------------------------------
class _EngineConfig(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("vendor", ctypes.c_int), ("device", ctypes.c_int),
                ("cache_dir", ctypes.c_char_p), ("flags", ctypes.c_uint32), ("cache_max_size", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "memory_hits", "disk_hits", "misses", "compiles", "compile_failures", "compile_nanoseconds",
        "corrupt_removed", "evictions", "bytes_written", "bytes_read", "remote_hits", "remote_misses",
        "remote_errors")]


class _DeviceInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("vendor", ctypes.c_int), ("ordinal", ctypes.c_int),
                ("name", ctypes.c_char * 128), ("target", ctypes.c_char * 64), ("warp_size", ctypes.c_int),
                ("max_threads_per_block", ctypes.c_int), ("multiprocessors", ctypes.c_int),
                ("total_memory", ctypes.c_uint64), ("max_shared_per_block", ctypes.c_uint64)]


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("text", ctypes.c_char_p)]


class _ProgramInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("key", ctypes.c_char * 33), ("target", ctypes.c_char * 64),
                ("device", ctypes.c_int), ("origin", ctypes.c_int), ("kernel_count", ctypes.c_size_t)]


class _KernelInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("device", ctypes.c_int), ("max_threads_per_block", ctypes.c_int),
                ("param_count", ctypes.c_int), ("name", ctypes.c_char_p), ("lowered_name", ctypes.c_char_p),
                ("native_handle", ctypes.c_void_p)]


class _PrewarmResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("key", ctypes.c_char * 33), ("target", ctypes.c_char * 64),
                ("origin", ctypes.c_int), ("seconds", ctypes.c_double), ("binary_bytes", ctypes.c_uint64),
                ("stored", ctypes.c_int)]


def _sized(struct_type):
    value = struct_type()
    value.size = ctypes.sizeof(struct_type)
    return value


# --- loading the library --------------------------------------------------------------------------
def _candidates():
    explicit = os.environ.get("KILN_LIBRARY")
    if explicit:
        return [explicit]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = []
    for pattern in ("build*/engine/libkiln.so", "build*/lib/libkiln.so", "build*/libkiln.so"):
        found += glob.glob(os.path.join(repo, pattern))
    found.sort(key=os.path.getmtime, reverse=True)
    system = ctypes.util.find_library("kiln")
    return found + ([system] if system else [])


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as error:
            tried.append(f"{path} ({error})")
    raise OSError("libkiln.so not found: set KILN_LIBRARY to its path, or build the repository "
                  "(tried: " + (", ".join(tried) if tried else "nothing matched") + ")")


_lib, library_path = _load()

_S = ctypes.c_int  # kiln_status
_H = ctypes.c_void_p  # any handle
_STRS = ctypes.POINTER(ctypes.c_char_p)
_PROTOTYPES = {
    "kiln_api_version": (ctypes.c_int, []),
    "kiln_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kiln_last_error": (ctypes.c_char_p, []),
    "kiln_last_compile_log": (ctypes.c_char_p, []),
    "kiln_engine_create": (_S, [ctypes.POINTER(_EngineConfig), ctypes.POINTER(_H)]),
    "kiln_engine_destroy": (_S, [_H]),
    "kiln_engine_vendor": (_S, [_H, ctypes.POINTER(ctypes.c_int)]),
    "kiln_engine_device_count": (_S, [_H, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]),
    "kiln_engine_device_info": (_S, [_H, ctypes.c_int, ctypes.POINTER(_DeviceInfo)]),
    "kiln_engine_stats": (_S, [_H, ctypes.POINTER(_Stats)]),
    "kiln_source_from_text": (_S, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_Header), ctypes.c_size_t,
                                   ctypes.POINTER(_H)]),
    "kiln_source_builtin": (_S, [ctypes.c_char_p, ctypes.POINTER(_H)]),
    "kiln_source_destroy": (_S, [_H]),
    "kiln_program_create": (_S, [_H, _H, _STRS, ctypes.c_size_t, _STRS, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.POINTER(_H)]),
    "kiln_program_destroy": (_S, [_H]),
    "kiln_program_get_kernel": (_S, [_H, ctypes.c_char_p, ctypes.POINTER(_H)]),
    "kiln_program_get_info": (_S, [_H, ctypes.POINTER(_ProgramInfo)]),
    "kiln_program_kernel_name": (_S, [_H, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p)]),
    "kiln_kernel_get": (_S, [_H, _H, ctypes.c_char_p, _STRS, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_H)]),
    "kiln_kernel_destroy": (_S, [_H]),
    "kiln_kernel_get_info": (_S, [_H, ctypes.POINTER(_KernelInfo)]),
    "kiln_kernel_launch": (_S, [_H] + [ctypes.c_uint32] * 7 + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                                                 ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t]),
    "kiln_prewarm": (_S, [_H, _H, _STRS, ctypes.c_size_t, _STRS, ctypes.c_size_t, ctypes.c_char_p,
                          ctypes.POINTER(_PrewarmResult)]),
    "kiln_synchronize": (_S, [_H, ctypes.c_void_p, ctypes.c_int]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _function = getattr(_lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes

if _lib.kiln_api_version() < API_VERSION:
    raise OSError(f"{library_path} has kiln API version {_lib.kiln_api_version()}, this module needs {API_VERSION}")


def _check(status):
    if status != 0:
        name = _lib.kiln_status_name(status).decode()
        log = _lib.kiln_last_compile_log().decode(errors="replace") if name == "KILN_ERROR_COMPILE" else ""
        raise KilnError(name, _lib.kiln_last_error().decode(errors="replace"), log)


def _strings(items):
    items = [s.encode() if isinstance(s, str) else bytes(s) for s in (items or ())]
    return (ctypes.c_char_p * len(items))(*items) if items else None, len(items)


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


# --- the objects ----------------------------------------------------------------------------------
class _Handle:
    _destroy = None

    def __init__(self, handle):
        self._handle = handle

    def close(self):
        """Destroys the handle now (it is also destroyed when garbage collected)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _lib is not None:
            getattr(_lib, self._destroy)(handle)  # an error here (engine already gone) changes nothing

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Source(_Handle):
    """A kernel source: text with in-memory headers, or a built-in by name."""
    _destroy = "kiln_source_destroy"

    @classmethod
    def from_text(cls, text, name="source.cu", headers=None):
        items = list((headers or {}).items())
        array = (_Header * len(items))(*[_Header(k.encode(), v.encode()) for k, v in items]) if items else None
        handle = _H()
        _check(_lib.kiln_source_from_text(name.encode(), text.encode(), array, len(items), ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def builtin(cls, name):
        handle = _H()
        _check(_lib.kiln_source_builtin(name.encode(), ctypes.byref(handle)))
        return cls(handle.value)


class Kernel(_Handle):
    """A launchable kernel. Call it: kernel(grid, block, args, shared=0, stream=None)."""
    _destroy = "kiln_kernel_destroy"

    def __init__(self, handle, engine):
        super().__init__(handle)
        self._engine = engine  # keeps the engine alive as long as its kernels

    def info(self):
        info = _sized(_KernelInfo)
        _check(_lib.kiln_kernel_get_info(self._handle, ctypes.byref(info)))
        return {"name": info.name.decode(), "lowered_name": info.lowered_name.decode(), "device": info.device,
                "max_threads_per_block": info.max_threads_per_block,
                "param_count": None if info.param_count < 0 else info.param_count}

    def __call__(self, grid, block, args, shared=0, stream=None):
        """Queues a launch on `stream` (asynchronous). Arguments are checked against the binary."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        held = [_argument(a) for a in args]  # kept alive until the call returns
        pointers = (ctypes.c_void_p * len(held))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
        sizes = (ctypes.c_size_t * len(held))(*[ctypes.sizeof(h) for h in held])
        _check(_lib.kiln_kernel_launch(self._handle, *grid, *block, shared, _stream_handle(stream),
                                       pointers if held else None, sizes if held else None, len(held)))


class Program(_Handle):
    """A compiled module on one device; kernels by name or name expression."""
    _destroy = "kiln_program_destroy"

    def __init__(self, handle, engine):
        super().__init__(handle)
        self._engine = engine

    def info(self):
        info = _sized(_ProgramInfo)
        _check(_lib.kiln_program_get_info(self._handle, ctypes.byref(info)))
        names = []
        for i in range(info.kernel_count):
            name = ctypes.c_char_p()
            _check(_lib.kiln_program_kernel_name(self._handle, i, ctypes.byref(name)))
            names.append(name.value.decode())
        return {"key": info.key.decode(), "target": info.target.decode(), "device": info.device,
                "origin": _ORIGINS.get(info.origin, "?"), "kernels": names}

    def kernel(self, name):
        handle = _H()
        _check(_lib.kiln_program_get_kernel(self._handle, name.encode(), ctypes.byref(handle)))
        return Kernel(handle.value, self._engine)


class Engine(_Handle):
    """A kiln engine: one vendor lane, a device, the disk cache. Settings default to the environment."""
    _destroy = "kiln_engine_destroy"

    def __init__(self, vendor=None, device=-1, cache_dir=None, cache_disable=False, cache_readonly=False):
        config = _sized(_EngineConfig)
        config.vendor = _VENDORS[vendor]
        config.device = device
        config.cache_dir = os.fsencode(cache_dir) if cache_dir else None
        config.flags = (_ENGINE_CACHE_DISABLE if cache_disable else 0) | (_ENGINE_CACHE_READONLY if cache_readonly else 0)
        handle = _H()
        _check(_lib.kiln_engine_create(ctypes.byref(config), ctypes.byref(handle)))
        super().__init__(handle.value)

    @property
    def vendor(self):
        value = ctypes.c_int()
        _check(_lib.kiln_engine_vendor(self._handle, ctypes.byref(value)))
        return _VENDOR_NAMES.get(value.value)

    def devices(self):
        """[(ordinal, info dict)] of the engine's lane; empty without a GPU."""
        count, default = ctypes.c_int(), ctypes.c_int()
        _check(_lib.kiln_engine_device_count(self._handle, ctypes.byref(count), ctypes.byref(default)))
        result = []
        for ordinal in range(count.value):
            info = _sized(_DeviceInfo)
            _check(_lib.kiln_engine_device_info(self._handle, ordinal, ctypes.byref(info)))
            result.append({"ordinal": info.ordinal, "name": info.name.decode(), "target": info.target.decode(),
                           "warp_size": info.warp_size, "multiprocessors": info.multiprocessors,
                           "total_memory": info.total_memory, "default": ordinal == default.value})
        return result

    def stats(self):
        stats = _sized(_Stats)
        _check(_lib.kiln_engine_stats(self._handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name, _ in _Stats._fields_[1:]}

    def program(self, source, options=(), name_expressions=(), device=-1):
        opts, nopts = _strings(options)
        names, nnames = _strings(name_expressions)
        handle = _H()
        _check(_lib.kiln_program_create(self._handle, source._handle, opts, nopts, names, nnames, device,
                                        ctypes.byref(handle)))
        return Program(handle.value, self)

    def kernel(self, source, name, options=(), device=-1):
        """Compiles (or finds in the cache) and loads one kernel: a plain name or a name expression."""
        opts, nopts = _strings(options)
        handle = _H()
        _check(_lib.kiln_kernel_get(self._handle, source._handle, name.encode(), opts, nopts, device,
                                    ctypes.byref(handle)))
        return Kernel(handle.value, self)

    def prewarm(self, source, target, options=(), name_expressions=()):
        """Compiles into the disk cache for a named target ("sm_90", "gfx90a"); needs no GPU."""
        opts, nopts = _strings(options)
        names, nnames = _strings(name_expressions)
        result = _sized(_PrewarmResult)
        _check(_lib.kiln_prewarm(self._handle, source._handle, opts, nopts, names, nnames, target.encode(),
                                 ctypes.byref(result)))
        return {"key": result.key.decode(), "target": result.target.decode(),
                "origin": _ORIGINS.get(result.origin, "?"), "seconds": result.seconds,
                "binary_bytes": result.binary_bytes, "stored": bool(result.stored)}

    def synchronize(self, stream=None, device=-1):
        _check(_lib.kiln_synchronize(self._handle, _stream_handle(stream), device))
