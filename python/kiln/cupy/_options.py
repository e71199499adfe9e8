"""CuPy's NVRTC options in kiln's spelling: translate_options() for the flags, arch_flag() for the target
CuPy would compile for."""

import re

# CuPy passes NVRTC flags. Each one this module knows maps to kiln's spelling; the others send the
# request back to CuPy, which knows them all.
_PORTABLE = {"--use_fast_math": "--fast-math", "-use_fast_math": "--fast-math", "-lineinfo": "--line-info",
             "--generate-line-info": "--line-info", "-G": "--device-debug", "--device-debug": "--device-debug",
             "-fmad=false": "--no-fma", "--fmad=false": "--no-fma"}
# kiln adds the default-execution-space flag itself; precompiled headers only speed up NVRTC, and
# kiln's cache answers repeated compiles without it.
_DROPPED = frozenset({"-default-device", "--device-as-default-execution-space", "--pch", "-pch"})
_RAW_EXACT = frozenset({"-fmad=true", "--fmad=true", "--extra-device-vectorization", "--restrict", "-restrict", "-w",
                        "--disable-warnings", "--Wno-deprecated-declarations", "-device-int128"})
_RAW_PREFIXES = ("-ftz=", "--ftz=", "-prec-div=", "--prec-div=", "-prec-sqrt=", "--prec-sqrt=", "-maxrregcount=",
                 "--maxrregcount=")
# Relocatable device code and LTO IR need a link step or another output kind: CuPy's path only.
_SEPARATE = frozenset({"--device-c", "-dc", "-rdc=true", "--relocatable-device-code=true", "-dlto", "-ewp",
                       "--extensible-whole-program"})
_STANDARDS = ("c++17", "c++20")
_MACRO = re.compile(r"-[DU][A-Za-z_][A-Za-z_0-9]*(=.*)?$", re.S)

translated = {}  # CuPy's options tuple -> translate_options(it): a program compiles with a few option sets


def translate_options(options):
    """(kiln options, None) for CuPy's NVRTC options without the target, or (None, reason) when one of
    them is not something this module passes to kiln."""
    out = []
    for option in options:
        if not isinstance(option, str):
            return None, f"option {option!r} is not a string"
        if option in _SEPARATE:
            return None, f"{option}: relocatable device code / LTO stays with CuPy"
        if option in _DROPPED:
            continue
        if option in _PORTABLE:
            out.append(_PORTABLE[option])
        elif option in _RAW_EXACT or option.startswith(_RAW_PREFIXES):
            out.append(option)
        elif option.startswith(("-std=", "--std=")):
            standard = option.split("=", 1)[1]
            if standard not in _STANDARDS:
                return None, f"{option}: kiln compiles C++17 or C++20 only"
            out.append("-std=" + standard)
        elif option.startswith("-I") or option.startswith("--include-path="):
            folder = option[2:] if option.startswith("-I") else option[len("--include-path="):]
            if not folder.strip():
                return None, f"{option}: an include folder without a name"
            out.append(option)
        elif _MACRO.match(option):
            if option.startswith("-U") and "=" in option:
                return None, f"{option}: -U takes a name only"
            out.append(option)
        else:
            return None, f"{option}: not an option kiln.cupy passes on"
    return out, None


def translate_cached(options):
    """translate_options(options), remembered for up to 256 option tuples."""
    try:
        result = translated.get(options)
    except TypeError:  # an option that is not hashable: translate_options says why it is refused
        result = None
    if result is None:
        result = translate_options(options)
        if len(translated) < 256:
            try:
                translated[options] = result
            except TypeError:
                pass
    return result


# Every NVRTC CuPy 14.2 runs with (CUDA 12.0 and later) compiles cubins up to compute capability 9.0.
_NVRTC_CUBIN_FLOOR = 90


def arch_flag(compiler, arch):
    """The -arch flag CuPy would compile this request with (compiler._get_arch and
    _get_arch_for_options_for_nvrtc decide it). CuPy asks NVRTC its version for the newest cubin arch,
    and the first such question loads NVRTC (milliseconds), which a request kiln answers from its cache
    does not need: while CuPy has not loaded NVRTC, an arch at or below every NVRTC's newest is decided
    here by CuPy's own rule (the device's compute capability; PTX when CUPY_COMPILE_WITH_PTX is set)."""
    if compiler._nvrtc_version is None:
        if arch is None:
            from cupy.cuda import device

            capability = device.Device().compute_capability
            if int(capability) <= _NVRTC_CUBIN_FLOOR:
                arch = capability  # CuPy: min(capability, NVRTC's newest), or a Tegra arch as it is
        if arch is not None and int(arch) <= _NVRTC_CUBIN_FLOOR:
            return f"-arch=compute_{arch}" if compiler._use_ptx else f"-arch=sm_{arch}"
    if arch is None:
        arch = compiler._get_arch()
    return compiler._get_arch_for_options_for_nvrtc(arch)[0]
