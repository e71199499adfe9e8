"""The routing Program: a subclass of cuda.core's Program that enable() puts in place of cuda.core.Program.

cuda.core's Program is a Cython extension type: its methods cannot be reassigned, and the source and
options it keeps are not readable from Python. The subclass keeps what its constructor was given (the
code, the code type, the ProgramOptions object cuda.core compiles with) and overrides compile(): a
request kiln can serve is compiled by kiln and returned as the ObjectCode cuda.core itself would return;
everything else goes to cuda.core's own compile() unchanged."""

import time

from .. import _api, _native, _routing
from ..errors import CompileError, Error
from . import _options, _program_cache, _state, _stats

# kiln's CompileError for a header it did not find (includes/src/compile_log.cpp: describe_missing_include).
_MISSING_HEADER = "is not among the in-memory headers"
_NVRTC_ERROR_COMPILATION = 6  # nvrtcResult of a failed nvrtcCompileProgram, as cuda.core's message states it
_TARGET_TYPES = ("cubin", "ptx", "ltoir")
_RELOCATABLE_API_VERSION = 5  # libkiln's --relocatable-device-code and lto_XY targets

# Each fallback reason is warned about once per process.
_warn_once = _routing.OnceWarner(_state.lock, "kiln.cuda_core: cuda.core compiles this program itself: ", stacklevel=4).warn




def _decode_names(name_expressions):
    """The name expressions as str for kiln (cuda.core takes str or bytes), or None when one is neither."""
    names = []
    for expression in name_expressions:
        if isinstance(expression, bytes):
            try:
                expression = expression.decode()
            except UnicodeDecodeError:
                return None
        elif not isinstance(expression, str):
            return None
        names.append(expression)
    return names


def routed_class_for(original):
    """The routing subclass of `original` (cuda.core's Program), made once."""

    class Program(original):
        __doc__ = original.__doc__
        __qualname__ = "Program"

        def __init__(self, code, code_type, options=None):
            from cuda.core import ProgramOptions

            # What cuda.core does with options=None or a dict, done here so that this object and
            # cuda.core's Program share the one ProgramOptions object compile() reads.
            if options is None:
                options = ProgramOptions()
            elif isinstance(options, dict):
                options = ProgramOptions(**options)
            super().__init__(code, code_type, options)
            self._kiln_code = code
            self._kiln_code_type = code_type.lower() if isinstance(code_type, str) else code_type
            self._kiln_options = options
            self._kiln_closed = False

        def close(self):
            self._kiln_closed = True
            return super().close()

        def compile(self, target_type, name_expressions=(), logs=None, *, cache=None):
            if not _state.enabled:  # disabled, but this object lives on: behave as cuda.core
                return super().compile(target_type, name_expressions, logs, cache=cache)
            return _compile(self, super().compile, target_type, name_expressions, logs, cache)

    return Program


def _fallback_reason(program, target_type, name_expressions, cache):
    if program._kiln_code_type != "c++":
        return f"code_type {program._kiln_code_type}"
    # A kiln ProgramCache is served by kiln through that cache's folder (_compile); any other cache is the
    # caller's choice of cuda.core's own caching.
    if cache is not None and not isinstance(cache, _program_cache.ProgramCacheMethods):
        return "cache= given: cuda.core's own program cache"
    if getattr(program, "_kiln_closed", False):
        return "program closed"
    if target_type not in _TARGET_TYPES:
        return f"target_type {target_type!r}"
    if target_type == "ltoir" and _state.ltoir is False:
        return "ltoir: the loaded libkiln has no LTO-IR target (lto_XY)"
    if not isinstance(program._kiln_code, str):
        return "code is not a str"
    if not isinstance(name_expressions, (tuple, list)):
        return "name_expressions is not a tuple or list"
    return None


def _compile(program, original_compile, target_type, name_expressions, logs, cache):
    entered = time.perf_counter()

    def fallback(reason):
        _stats.count("fallbacks", reason)
        return original_compile(target_type, name_expressions, logs, cache=cache)

    reason = _fallback_reason(program, target_type, name_expressions, cache)
    if reason:
        return fallback(reason)
    options = program._kiln_options
    try:
        flags = [flag.decode() for flag in options.as_bytes("nvrtc", target_type)]
    except Exception:  # cuda.core refuses these options: its own compile says how
        return fallback("options refused by ProgramOptions.as_bytes")
    arch, kiln_options, reason = _options.translate_flags(flags, target_type)
    if reason:
        return fallback(reason)
    target, reason = _options.target_for(arch, target_type)
    if reason:
        return fallback(reason)
    if _options.RELOCATABLE in kiln_options and _native.load()[2] < _RELOCATABLE_API_VERSION:
        return fallback("relocatable device code: the loaded libkiln has no --relocatable-device-code (API 5)")
    names = _decode_names(name_expressions)
    if names is None:
        return fallback("a name expression that is not str or UTF-8 bytes")
    name = options.name if options.name is not None else "default_program"

    started = time.perf_counter()
    refusal = None
    try:
        # With a kiln ProgramCache, its engine (its folder and size cap) is the cache the compile goes
        # through: kiln's own key, which covers header content and name expressions, stands for cuda.core's.
        engine = cache.engine if cache is not None else (_state.engine or _api.default_engine())
        if engine.vendor == "hip":
            refusal = "kiln engine is HIP"
        else:
            library = _native.require(_native.COMPILE_API_VERSION, "kiln.cuda_core (kiln_compile)")
            binary = engine._compile_text(library, name, program._kiln_code, kiln_options, names, target)
    except CompileError as error:
        if _MISSING_HEADER not in error.message:
            _stats.count_compile_error()
            log = error.log or error.message
            raise _state.nvrtc_error(
                f"{_NVRTC_ERROR_COMPILATION}: NVRTC_ERROR_COMPILATION, compilation log:\n\n{log}") from None
        # kiln hands NVRTC in-memory headers only; NVRTC as cuda.core runs it also searches the source's
        # folder (the working directory for a plain name), which kiln cannot key.
        refusal = "kiln: a header not found in the include folders (NVRTC also searches the source's folder)"
        said = next(line for line in error.message.splitlines() if _MISSING_HEADER in line)
        _warn_once(f"{refusal}: {said.strip()[:300]}")
    except (Error, ValueError) as error:
        message = str(getattr(error, "message", error))
        if target_type == "ltoir" and "unknown target" in message:
            with _state.lock:
                _state.ltoir = False  # this libkiln has no lto_XY target: later ltoir requests skip kiln
            refusal = "ltoir: the loaded libkiln has no LTO-IR target (lto_XY)"
        else:
            # kiln refuses the request as configured (an option or folder it cannot take, no NVRTC, a NUL
            # byte a C string cannot carry, ...): cuda.core may still compile it.
            what = getattr(error, "status", None) or type(error).__name__
            said = f"kiln: {what}: {message}"
            _warn_once(said)
            refusal = said.split("\n", 1)[0][:200]
    if refusal:
        return fallback(refusal)

    compiled = time.perf_counter()
    from cuda.core import ObjectCode

    data = binary.data
    if target_type == "ltoir":
        if binary.kind in ("cubin", "ptx", "amd_code_object"):
            with _state.lock:
                _state.ltoir = False
            return fallback(f"ltoir: kiln returned {binary.kind} for target {target}")
        with _state.lock:
            _state.ltoir = True
        make = ObjectCode.from_ltoir
    elif target_type == "ptx":
        if not data.endswith(b"\0"):
            data += b"\0"  # NVRTC's PTX, as cuda.core returns it, ends with its NUL
        make = ObjectCode.from_ptx
    else:
        make = ObjectCode.from_cubin
    # cuda.core maps each name expression, as given, to the lowered name as bytes (NVRTC's C string).
    mapping = {given: binary.lowered_names[text].encode() for given, text in zip(name_expressions, names)}
    result = make(data, name=name, symbol_mapping=mapping)
    if logs is not None and binary.log:
        logs.write(binary.log)
    _stats.add_seconds(started - entered, compiled - started)
    _stats.count("routed", binary.origin)
    if cache is not None:
        cache._note_routed(binary.origin)
    return result
