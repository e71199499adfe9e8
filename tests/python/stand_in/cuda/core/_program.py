"""cuda.core._program of the stand-in: Program and ProgramOptions (cuda.core 1.2.0's names and signatures)."""

import dataclasses

from cuda.core._device import Device
from cuda.core._module import ObjectCode

__all__ = ["Program", "ProgramOptions"]

calls = []  # every Program.compile that reached the stand-in: a dict of its arguments and the program's
MARKER = b"stand-in: compiled by cuda.core"


class _ExtensionType(type):
    """Attributes of the class cannot be set or deleted, as those of a Cython extension type (cdef class);
    a Python subclass of it is an ordinary class, as a subclass of an extension type is."""

    def __setattr__(cls, name, value):
        if "_extension_type" not in cls.__dict__:
            return super().__setattr__(name, value)
        raise TypeError(f"cannot set {name!r} attribute of immutable type '{cls.__module__}.{cls.__qualname__}'")

    def __delattr__(cls, name):
        if "_extension_type" not in cls.__dict__:
            return super().__delattr__(name)
        raise TypeError(f"cannot delete {name!r} attribute of immutable type '{cls.__module__}.{cls.__qualname__}'")


def _boolean(value):
    return "true" if value else "false"


def _many(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclasses.dataclass
class ProgramOptions:
    """The fields of cuda.core 1.2's ProgramOptions; as_bytes() spells them as cuda.core hands them to NVRTC."""

    name: object = "default_program"
    arch: object = None
    relocatable_device_code: object = None
    extensible_whole_program: object = None
    debug: object = None
    lineinfo: object = None
    device_code_optimize: object = None
    ptxas_options: object = None
    max_register_count: object = None
    ftz: object = None
    prec_sqrt: object = None
    prec_div: object = None
    fma: object = None
    use_fast_math: object = None
    extra_device_vectorization: object = None
    link_time_optimization: object = None
    gen_opt_lto: object = None
    define_macro: object = None
    undefine_macro: object = None
    include_path: object = None
    pre_include: object = None
    no_source_include: object = None
    std: object = None
    builtin_move_forward: object = None
    builtin_initializer_list: object = None
    disable_warnings: object = None
    restrict: object = None
    device_as_default_execution_space: object = None
    device_int128: object = None
    optimization_info: object = None
    no_display_error_number: object = None
    diag_error: object = None
    diag_suppress: object = None
    diag_warn: object = None
    brief_diagnostics: object = None
    time: object = None
    split_compile: object = None
    fdevice_syntax_only: object = None
    minimal: object = None
    no_cache: object = None
    fdevice_time_trace: object = None
    device_float128: object = None
    frandom_seed: object = None
    ofast_compile: object = None
    pch: object = None
    create_pch: object = None
    use_pch: object = None
    pch_dir: object = None
    pch_verbose: object = None
    pch_messages: object = None
    instantiate_templates_in_pch: object = None
    extra_sources: object = None
    use_libdevice: object = None
    numba_debug: object = None

    def __post_init__(self):
        if self.name is None:
            self.name = "default_program"
        if self.arch is None:
            self.arch = f"sm_{Device().arch}"

    def as_bytes(self, backend, target_type=None):
        if backend.lower() != "nvrtc":
            raise ValueError(f"Unknown backend '{backend}' (the stand-in spells NVRTC flags only)")
        flags = [f"-arch={self.arch}"]
        switches = [("relocatable_device_code", "--relocatable-device-code=", True),
                    ("extensible_whole_program", "--extensible-whole-program", False),
                    ("debug", "--device-debug", False), ("lineinfo", "--generate-line-info", False),
                    ("device_code_optimize", "--dopt=on", False)]
        for field, flag, valued in switches:
            value = getattr(self, field)
            if value is not None and (valued or value):
                flags.append(flag + _boolean(value) if valued else flag)
        if self.ptxas_options is not None:
            flags += [f"--ptxas-options={value}" for value in _many(self.ptxas_options)]
        if self.max_register_count is not None:
            flags.append(f"--maxrregcount={self.max_register_count}")
        for field, flag in (("ftz", "--ftz="), ("prec_sqrt", "--prec-sqrt="), ("prec_div", "--prec-div="),
                            ("fma", "--fmad=")):
            if getattr(self, field) is not None:
                flags.append(flag + _boolean(getattr(self, field)))
        for field, flag in (("use_fast_math", "--use_fast_math"),
                            ("extra_device_vectorization", "--extra-device-vectorization"),
                            ("link_time_optimization", "--dlink-time-opt"), ("gen_opt_lto", "--gen-opt-lto")):
            if getattr(self, field):
                flags.append(flag)
        if self.define_macro is not None:
            for macro in ([self.define_macro] if isinstance(self.define_macro, (str, tuple)) else self.define_macro):
                if isinstance(macro, tuple):
                    if len(macro) != 2:
                        raise RuntimeError(f"Expected define_macro tuple[str, str], got {macro}")
                    macro = f"{macro[0]}={macro[1]}"
                flags.append(f"--define-macro={macro}")
        for field, flag in (("undefine_macro", "--undefine-macro="), ("include_path", "--include-path="),
                            ("pre_include", "--pre-include=")):
            if getattr(self, field) is not None:
                flags += [flag + str(value) for value in _many(getattr(self, field))]
        if self.no_source_include:
            flags.append("--no-source-include")
        if self.std is not None:
            flags.append(f"--std={self.std}")
        for field, flag in (("builtin_move_forward", "--builtin-move-forward="),
                            ("builtin_initializer_list", "--builtin-initializer-list=")):
            if getattr(self, field) is not None:
                flags.append(flag + _boolean(getattr(self, field)))
        for field, flag in (("disable_warnings", "--disable-warnings"), ("restrict", "--restrict"),
                            ("device_as_default_execution_space", "--device-as-default-execution-space"),
                            ("device_int128", "--device-int128"), ("device_float128", "--device-float128")):
            if getattr(self, field):
                flags.append(flag)
        if self.optimization_info is not None:
            flags.append(f"--optimization-info={self.optimization_info}")
        if self.no_display_error_number:
            flags.append("--no-display-error-number")
        for field, flag in (("diag_error", "--diag-error="), ("diag_suppress", "--diag-suppress="),
                            ("diag_warn", "--diag-warn=")):
            if getattr(self, field) is not None:
                flags += [flag + str(value) for value in _many(getattr(self, field))]
        if self.brief_diagnostics is not None:
            flags.append(f"--brief-diagnostics={_boolean(self.brief_diagnostics)}")
        for field, flag in (("time", "--time="), ("split_compile", "--split-compile=")):
            if getattr(self, field) is not None:
                flags.append(flag + str(getattr(self, field)))
        for field, flag in (("fdevice_syntax_only", "--fdevice-syntax-only"), ("minimal", "--minimal"),
                            ("no_cache", "--no-cache")):
            if getattr(self, field):
                flags.append(flag)
        for field, flag in (("fdevice_time_trace", "--fdevice-time-trace="), ("frandom_seed", "--frandom-seed="),
                            ("ofast_compile", "--Ofast-compile=")):
            if getattr(self, field) is not None:
                flags.append(flag + str(getattr(self, field)))
        if self.pch:
            flags.append("--pch")
        for field, flag in (("create_pch", "--create-pch="), ("use_pch", "--use-pch="), ("pch_dir", "--pch-dir=")):
            if getattr(self, field) is not None:
                flags.append(flag + str(getattr(self, field)))
        for field, flag in (("pch_verbose", "--pch-verbose="), ("pch_messages", "--pch-messages="),
                            ("instantiate_templates_in_pch", "--instantiate-templates-in-pch=")):
            if getattr(self, field) is not None:
                flags.append(flag + _boolean(getattr(self, field)))
        if self.numba_debug:
            flags.append("--numba-debug")
        return [flag.encode() for flag in flags]


_SUPPORTED_TARGETS = {"c++": ("ptx", "cubin", "ltoir"), "ptx": ("cubin", "ptx"), "nvvm": ("ptx", "ltoir")}


class Program(metaclass=_ExtensionType):
    """Stand-in for cuda.core's Program (a Cython extension type: its methods cannot be reassigned)."""

    _extension_type = True

    def __init__(self, code, code_type, options=None):
        if options is None:
            options = ProgramOptions()
        elif isinstance(options, dict):
            options = ProgramOptions(**options)
        elif not isinstance(options, ProgramOptions):
            raise TypeError(f"The Program options must be provided as an object of type ProgramOptions or as a "
                            f"dict with valid Program options. The provided object is '{options}'.")
        code_type = code_type.lower()
        if code_type not in _SUPPORTED_TARGETS:
            raise RuntimeError(f"Unsupported code_type={code_type!r}")
        if code_type in ("c++", "ptx") and not isinstance(code, str):
            raise TypeError(f"Expected type str, but got {type(code).__name__}")
        self.__private = (code, code_type, options)  # kiln.cuda_core must not need this (a cdef class hides it)
        self.__closed = False

    def close(self):
        self.__closed = True

    @property
    def backend(self):
        return {"c++": "NVRTC", "ptx": "nvJitLink", "nvvm": "NVVM"}[self.__private[1]]

    def compile(self, target_type, name_expressions=(), logs=None, *, cache=None):
        code, code_type, options = self.__private
        calls.append(dict(code=code, code_type=code_type, options=options, target_type=target_type,
                          name_expressions=name_expressions, logs=logs, cache=cache))
        if self.__closed:
            raise RuntimeError("Program is closed")
        if target_type not in _SUPPORTED_TARGETS[code_type]:
            raise ValueError(f'Unsupported target_type="{target_type}" for {self.backend}')
        if cache is not None:
            # cuda.core's own cache path: the cache stores the binary's bytes only, so name expressions
            # (whose symbol_mapping would be lost on a hit) are refused, and the key is
            # make_program_cache_key's (imported here, as cuda.core defers that import).
            if name_expressions:
                raise ValueError("name_expressions cannot be used with cache=")
            from cuda.core.utils import make_program_cache_key
            key = make_program_cache_key(code=code, code_type=code_type, options=options, target_type=target_type)
            found = cache.get(key)
            if found is not None:
                return ObjectCode._init(found, target_type, name=options.name)
        mapping = {name: b"original_" + (name.encode() if isinstance(name, str) else name)
                   for name in name_expressions}
        result = ObjectCode._init(MARKER + b" " + target_type.encode() + b" " + b" ".join(mapping.values()),
                                  target_type, name=options.name, symbol_mapping=mapping)
        if logs is not None:
            logs.write("stand-in: cuda.core's log\n")
        if cache is not None:
            cache[key] = result  # the ObjectCode: the cache takes what it keeps of it
        return result

    def __repr__(self):
        return f"<Program backend='{self.backend}'>"
