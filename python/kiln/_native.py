"""Finding and loading libkiln, and the ctypes mirrors of kiln.h.

The library is loaded on first use, not at `import kiln`: importing the package never fails for want
of the library, and the error, when it comes, says where kiln looked. Where it looks, in order:

 1. KILN_LIBRARY (a file path): only that file; a bad path is an error, never a silent fallback. It
    comes first so that a library of one's own can always be tried, wheel or not.
 2. The wheel's own: kiln/lib/libkiln.so.0, which scripts/build_wheel.sh puts there with the private
    shared libraries it needs beside it (and the CLI in kiln/bin/). Built together with this package,
    so it is the one that matches it.
 3. Next to the package: kiln/libkiln.so (a copy put there by hand), then the install tree the package
    sits in: <prefix>/lib/pythonX.Y/site-packages/kiln finds <prefix>/lib/libkiln.so (also lib64/ and
    lib/<multiarch>/), and Debian's <prefix>/local/lib/pythonX.Y/dist-packages/kiln (pip --prefix) finds
    <prefix>/local/lib/ and <prefix>/lib/.
 4. A kiln source tree the package is part of (<repo>/python/kiln): <repo>/build*/engine/libkiln.so,
    newest first, so the package works straight from a checkout after a build.
 5. The system loader: libkiln.so / libkiln.so.0 through LD_LIBRARY_PATH and the loader cache.
"""

import ctypes
import glob
import os
import sysconfig
import threading

from .errors import LibraryError, error_type

API_VERSION = 1  # the oldest kiln_api_version() this package works with
COMPILE_API_VERSION = 2  # kiln_compile and kiln_binary_*
BLOB_API_VERSION = 6  # kiln_blob_*: entries under a caller's key
LABEL_API_VERSION = 7  # kiln_blob_put_labeled, kiln_blob_get_label; KILN_ENGINE_NO_RUNTIME
RECORD_API_VERSION = 8  # kiln_engine_record_stats

_LIBRARY_NAMES = ("libkiln.so", "libkiln.so.0")
# Where a wheel carries libkiln, under its soname (a zip holds no links): the name the CLI beside it
# asks the loader for. scripts/build_wheel.sh and the wheel test use these paths too.
WHEEL_LIBRARY = os.path.join("lib", "libkiln.so.0")
WHEEL_CLI = os.path.join("bin", "kiln")


# --- the C structs (mirrors of kiln.h; each starts with its size) --------------------------------
class EngineConfig(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("vendor", ctypes.c_int), ("device", ctypes.c_int),
                ("cache_dir", ctypes.c_char_p), ("flags", ctypes.c_uint32), ("cache_max_size", ctypes.c_uint64)]


STAT_NAMES = ("memory_hits", "disk_hits", "misses", "compiles", "compile_failures", "compile_nanoseconds",
              "corrupt_removed", "evictions", "bytes_written", "bytes_read", "remote_hits", "remote_misses",
              "remote_errors", "manifest_hits", "include_resolves", "remote_unauthenticated",  # these 3: API 3
              "pch_made", "pch_used")  # these 2: API 4


class Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in STAT_NAMES]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("vendor", ctypes.c_int), ("ordinal", ctypes.c_int),
                ("name", ctypes.c_char * 128), ("target", ctypes.c_char * 64), ("warp_size", ctypes.c_int),
                ("max_threads_per_block", ctypes.c_int), ("multiprocessors", ctypes.c_int),
                ("total_memory", ctypes.c_uint64), ("max_shared_per_block", ctypes.c_uint64)]


class BlobLabel(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("text", ctypes.c_char_p)]


class ProgramInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("key", ctypes.c_char * 33), ("target", ctypes.c_char * 64),
                ("device", ctypes.c_int), ("origin", ctypes.c_int), ("kernel_count", ctypes.c_size_t)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("device", ctypes.c_int), ("max_threads_per_block", ctypes.c_int),
                ("param_count", ctypes.c_int), ("name", ctypes.c_char_p), ("lowered_name", ctypes.c_char_p),
                ("native_handle", ctypes.c_void_p)]


class PrewarmResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("key", ctypes.c_char * 33), ("target", ctypes.c_char * 64),
                ("origin", ctypes.c_int), ("seconds", ctypes.c_double), ("binary_bytes", ctypes.c_uint64),
                ("stored", ctypes.c_int)]


class BinaryInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("data", ctypes.c_void_p), ("data_size", ctypes.c_size_t),
                ("kind", ctypes.c_int), ("target", ctypes.c_char * 64), ("key", ctypes.c_char * 33),
                ("origin", ctypes.c_int), ("name_count", ctypes.c_size_t), ("seconds", ctypes.c_double)]


def sized(struct_type):
    value = struct_type()
    value.size = ctypes.sizeof(struct_type)
    return value


ENGINE_CACHE_DISABLE = 0x1
ENGINE_CACHE_READONLY = 0x2
ENGINE_NO_RUNTIME = 0x4  # API 7
VENDORS = {None: 0, "auto": 0, "cuda": 1, "hip": 2}
VENDOR_NAMES = {0: None, 1: "cuda", 2: "hip"}
ORIGINS = {0: "memory", 1: "disk", 2: "compiled", 3: "pack", 4: "remote"}
BINARY_KINDS = {1: "cubin", 2: "ptx", 3: "amd_code_object", 4: "ltoir"}  # 4: API 5 (lto_XY targets)

_S = ctypes.c_int  # kiln_status
H = ctypes.c_void_p  # any handle
_P = ctypes.POINTER
_STRS = _P(ctypes.c_char_p)
_STR_OUT = _P(ctypes.c_char_p)
_PROTOTYPES = {
    # API version 1
    "kiln_api_version": (ctypes.c_int, []),
    "kiln_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kiln_last_error": (ctypes.c_char_p, []),
    "kiln_last_compile_log": (ctypes.c_char_p, []),
    "kiln_engine_create": (_S, [_P(EngineConfig), _P(H)]),
    "kiln_engine_destroy": (_S, [H]),
    "kiln_engine_vendor": (_S, [H, _P(ctypes.c_int)]),
    "kiln_engine_device_count": (_S, [H, _P(ctypes.c_int), _P(ctypes.c_int)]),
    "kiln_engine_device_info": (_S, [H, ctypes.c_int, _P(DeviceInfo)]),
    "kiln_engine_stats": (_S, [H, _P(Stats)]),
    "kiln_source_from_text": (_S, [ctypes.c_char_p, ctypes.c_char_p, _P(Header), ctypes.c_size_t, _P(H)]),
    "kiln_source_builtin": (_S, [ctypes.c_char_p, _P(H)]),
    "kiln_source_destroy": (_S, [H]),
    "kiln_builtin_source_name": (_S, [ctypes.c_size_t, _P(ctypes.c_size_t), _STR_OUT]),
    "kiln_program_create": (_S, [H, H, _STRS, ctypes.c_size_t, _STRS, ctypes.c_size_t, ctypes.c_int, _P(H)]),
    "kiln_program_destroy": (_S, [H]),
    "kiln_program_get_kernel": (_S, [H, ctypes.c_char_p, _P(H)]),
    "kiln_program_get_info": (_S, [H, _P(ProgramInfo)]),
    "kiln_program_kernel_name": (_S, [H, ctypes.c_size_t, _STR_OUT]),
    "kiln_kernel_get": (_S, [H, H, ctypes.c_char_p, _STRS, ctypes.c_size_t, ctypes.c_int, _P(H)]),
    "kiln_kernel_destroy": (_S, [H]),
    "kiln_kernel_get_info": (_S, [H, _P(KernelInfo)]),
    "kiln_kernel_launch": (_S, [H] + [ctypes.c_uint32] * 7 + [ctypes.c_void_p, _P(ctypes.c_void_p),
                                                             _P(ctypes.c_size_t), ctypes.c_size_t]),
    "kiln_prewarm": (_S, [H, H, _STRS, ctypes.c_size_t, _STRS, ctypes.c_size_t, ctypes.c_char_p, _P(PrewarmResult)]),
    "kiln_synchronize": (_S, [H, ctypes.c_void_p, ctypes.c_int]),
    # API version 2: compile only
    "kiln_compile": (_S, [H, H, _STRS, ctypes.c_size_t, _STRS, ctypes.c_size_t, ctypes.c_char_p, _P(H)]),
    "kiln_binary_destroy": (_S, [H]),
    "kiln_binary_get_info": (_S, [H, _P(BinaryInfo)]),
    "kiln_binary_name": (_S, [H, ctypes.c_size_t, _STR_OUT, _STR_OUT]),
    "kiln_binary_lowered_name": (_S, [H, ctypes.c_char_p, _STR_OUT]),
    "kiln_binary_log": (_S, [H, _STR_OUT]),
    # API version 6: entries under a caller's key (a namespace and key bytes)
    "kiln_blob_put": (_S, [H, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                           _P(ctypes.c_int)]),
    "kiln_blob_get": (_S, [H, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, _P(H)]),
    "kiln_blob_data": (_S, [H, _P(ctypes.c_void_p), _P(ctypes.c_size_t), _P(ctypes.c_int)]),
    "kiln_blob_destroy": (_S, [H]),
    "kiln_blob_remove": (_S, [H, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, _P(ctypes.c_int)]),
    "kiln_blob_count": (_S, [H, ctypes.c_char_p, _P(ctypes.c_uint64)]),
    "kiln_blob_clear": (_S, [H, ctypes.c_char_p, _P(ctypes.c_uint64)]),
    # API version 7: labels on blobs
    "kiln_blob_put_labeled": (_S, [H, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                   ctypes.c_size_t, _P(BlobLabel), ctypes.c_size_t, _P(ctypes.c_int)]),
    "kiln_blob_get_label": (_S, [H, ctypes.c_size_t, _P(ctypes.c_size_t), _STR_OUT, _STR_OUT]),
    # API version 8
    "kiln_engine_record_stats": (_S, [H]),
}
_VERSION_2 = ("kiln_compile", "kiln_binary_destroy", "kiln_binary_get_info", "kiln_binary_name",
              "kiln_binary_lowered_name", "kiln_binary_log")
_VERSION_6 = ("kiln_blob_put", "kiln_blob_get", "kiln_blob_data", "kiln_blob_destroy", "kiln_blob_remove",
              "kiln_blob_count", "kiln_blob_clear")
_VERSION_7 = ("kiln_blob_put_labeled", "kiln_blob_get_label")
_VERSION_8 = ("kiln_engine_record_stats",)
# The API version that added a function (1 for the rest): an older library lacks it, and require() says so
# when one of them is needed.
_INTRODUCED = {**{name: COMPILE_API_VERSION for name in _VERSION_2}, **{name: BLOB_API_VERSION for name in _VERSION_6},
               **{name: LABEL_API_VERSION for name in _VERSION_7}, **{name: RECORD_API_VERSION for name in _VERSION_8}}
BLOB_MAX_NAMESPACE = 256  # KILN_BLOB_MAX_NAMESPACE
BLOB_MAX_KEY = 65536  # KILN_BLOB_MAX_KEY
BLOB_MAX_LABELS = 16  # KILN_BLOB_MAX_LABELS

_lock = threading.Lock()
_loaded = None  # (ctypes.CDLL, path, api version) once loaded


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def candidates():
    """The places libkiln is looked for, in order: (what, path or loader name)."""
    explicit = os.environ.get("KILN_LIBRARY")
    if explicit:
        return [("KILN_LIBRARY", explicit)]
    package = _package_dir()
    found = [("wheel", os.path.join(package, WHEEL_LIBRARY))]
    found += [("package", os.path.join(package, name)) for name in _LIBRARY_NAMES]
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    folder = package
    for _ in range(4):  # kiln -> site-packages -> pythonX.Y -> lib (-> prefix, for a lib64 sibling)
        folder = os.path.dirname(folder)
        if os.path.basename(folder) in ("lib", "lib64"):
            libs = [folder]
            # Debian's pip puts `--prefix P` packages under P/local/lib/pythonX.Y/dist-packages, while
            # `cmake --install --prefix P` puts libkiln in P/lib: look there too.
            if os.path.basename(os.path.dirname(folder)) == "local":
                libs += [os.path.join(os.path.dirname(os.path.dirname(folder)), lib) for lib in ("lib", "lib64")]
            for lib_folder in libs:
                for sub in ([""] + ([multiarch] if multiarch else [])):
                    found += [("install tree", os.path.join(lib_folder, sub, name)) for name in _LIBRARY_NAMES]
    repo = os.path.dirname(os.path.dirname(package))
    if os.path.basename(os.path.dirname(package)) == "python" and os.path.isfile(os.path.join(repo, "CMakeLists.txt")):
        builds = []
        for pattern in ("build*/engine/libkiln.so", "build*/lib/libkiln.so"):
            builds += glob.glob(os.path.join(repo, pattern))
        builds.sort(key=os.path.getmtime, reverse=True)
        found += [("source tree build", path) for path in builds]
    found = [(what, path) for what, path in found if os.path.exists(path)]
    found += [("system loader", name) for name in _LIBRARY_NAMES]
    import ctypes.util  # only here: importing it costs milliseconds (shutil, subprocess)
    system = ctypes.util.find_library("kiln")
    if system:
        found.append(("system loader", system))
    return found


def _open():
    tried = []
    for what, path in candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as error:
            if what == "KILN_LIBRARY":
                raise LibraryError(f"KILN_LIBRARY={path} could not be loaded: {error}") from None
            if what == "wheel":  # never a quiet fallback to some other libkiln of another version
                raise LibraryError(f"the libkiln this wheel carries, {path}, could not be loaded: {error} "
                                   "(set KILN_LIBRARY to use another libkiln)") from None
            tried.append(f"{path} ({what}: {error})")
            continue
        if not hasattr(lib, "kiln_api_version"):
            tried.append(f"{path} ({what}: not libkiln: no kiln_api_version)")
            if what == "KILN_LIBRARY":
                raise LibraryError(f"KILN_LIBRARY={path} is not libkiln (it has no kiln_api_version)")
            if what == "wheel":
                raise LibraryError(f"{path}, in this wheel's place for libkiln, is not libkiln (it has no "
                                   "kiln_api_version)")
            continue
        return lib, path
    raise LibraryError("libkiln.so not found: set KILN_LIBRARY to its path, install kiln (cmake --install) next to "
                       "this package, install the kiln wheel (scripts/build_wheel.sh), or build the repository. "
                       "Tried: " + "; ".join(tried))


def load():
    """(library, path, api_version); loads the library on the first call."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            lib, path = _open()
            lib.kiln_api_version.restype = ctypes.c_int
            lib.kiln_api_version.argtypes = []
            version = lib.kiln_api_version()
            if version < API_VERSION:
                raise LibraryError(f"{path} has kiln API version {version}; this package needs {API_VERSION} or newer")
            for name, (restype, argtypes) in _PROTOTYPES.items():
                function = getattr(lib, name, None)
                if function is None:
                    if version < _INTRODUCED.get(name, API_VERSION):
                        continue  # an older library: require() explains when one of these is needed
                    raise LibraryError(f"{path} (kiln API version {version}) lacks {name}")
                function.restype = restype
                function.argtypes = argtypes
            _loaded = (lib, path, version)
    return _loaded


def lib():
    return load()[0]


def require(version, what):
    """The library, when its API version is at least `version`; else a LibraryError naming `what`."""
    library, path, have = load()
    if have < version:
        raise LibraryError(f"{what} needs kiln API version {version} or newer; {path} has version {have}: "
                           "rebuild or update libkiln (or point KILN_LIBRARY at a newer one)")
    return library


def check(status):
    """Raises the kiln.Error subclass for a failing kiln_status, with kiln's message (and log)."""
    if status != 0:
        library = lib()
        name = library.kiln_status_name(status).decode()
        cls = error_type(status)
        log = library.kiln_last_compile_log().decode(errors="replace") if cls.code == 3 else ""
        raise cls(library.kiln_last_error().decode(errors="replace"), name, log)


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def c_string(value, what):
    """The bytes (UTF-8) of `value` for a `const char*` argument of the C API; `what` names the argument
    in the errors. Only a str is taken (bytes are refused too, everywhere: the package has one kind of
    text). A C string ends at its first NUL byte, so a str holding one would reach kiln cut short:
    refused with a ValueError rather than cut silently."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__} ({_shown(value)})")
    at = value.find("\0")
    if at >= 0:
        raise ValueError(f"{what} holds a NUL byte (at index {at}): a C string ends there, so kiln would get only "
                         "what comes before it")
    try:
        return value.encode()
    except UnicodeEncodeError as error:  # a lone surrogate: no UTF-8 for it
        raise ValueError(f"{what} cannot be encoded as UTF-8: {error}") from None


def strings(items, what):
    """A (char*[], count) pair from a sequence of str; a lone str is one item and None none. `what` names
    the argument in the errors (TypeError for what is not a str or a sequence of str; ValueError for an
    item holding a NUL byte, see c_string)."""
    if items is None:
        items = ()
    elif isinstance(items, str):
        items = (items,)
    elif isinstance(items, (bytes, bytearray, dict)) or not hasattr(items, "__iter__"):
        raise TypeError(f"{what} must be a str or a sequence of str, got {type(items).__name__} ({_shown(items)})")
    encoded = [c_string(item, f"{what}[{index}]") for index, item in enumerate(items)]
    return ((ctypes.c_char_p * len(encoded))(*encoded) if encoded else None), len(encoded)
