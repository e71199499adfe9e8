"""cuda.core's NVRTC flags in kiln's spelling.

kiln does not read ProgramOptions' fields one by one: it asks ProgramOptions.as_bytes("nvrtc",
target_type) (public API) for the flags cuda.core itself would hand NVRTC, and translates those. A field
cuda.core adds later shows up as a flag this module does not know, and the request goes to cuda.core
instead of being compiled without it."""

import re

RELOCATABLE = "--relocatable-device-code"  # kiln's option (libkiln API 5 and later)
# kiln adds NVRTC's -default-device unless told not to; cuda.core passes it only for
# device_as_default_execution_space=True, and it changes the binary (namespace-scope constexpr variables become
# device variables), so without it kiln is told to leave it out. A libkiln older than this option refuses it as
# unknown: the request then goes to cuda.core (a ConfigError is a fallback).
NO_DEFAULT_DEVICE = "--no-default-device"
DEFAULT_DEVICE = "--device-as-default-execution-space"
# Flags of cuda.core's NVRTC spelling that kiln takes as they are or in its portable spelling.
_PORTABLE = {"--use_fast_math": "--fast-math", "--fmad=false": "--no-fma", "--device-int128": "-device-int128",
             "--relocatable-device-code=true": RELOCATABLE}
_RAW_EXACT = frozenset({"--fmad=true", "--extra-device-vectorization", "--restrict", "--disable-warnings",
                        "--minimal"})
_RAW_PREFIXES = ("--ftz=", "--prec-sqrt=", "--prec-div=", "--split-compile=")
# Flags that change nothing for kiln: NVRTC's defaults spelled out, what kiln adds itself, and the
# source-folder include that kiln never does (it searches the include folders only).
_DROPPED = frozenset({"--relocatable-device-code=false", "--builtin-move-forward=true",
                      "--builtin-initializer-list=true", DEFAULT_DEVICE, "--no-source-include"})
# Link-time optimisation: the LTO-IR target type carries it.
_LTO = frozenset({"--dlink-time-opt", "-dlto"})
_STANDARDS = ("c++17", "c++20")
_MACRO_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*$")
_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)$")
_MAX_REGISTERS = re.compile(r"--maxrregcount=\d+$")

# Why a flag cuda.core may pass stays with cuda.core (anything else unknown is said as such).
_KEPT = {"--extensible-whole-program": "extensible whole-program compilation",
         "--gen-opt-lto": "gen_opt_lto", "--fdevice-syntax-only": "syntax-only compile (no output)",
         "--no-cache": "no_cache", "--pch": "precompiled headers", "--device-float128": "device_float128",
         "--numba-debug": "numba_debug", "--no-display-error-number": "no_display_error_number",
         # Measured on an H200 with cuda.core 1.2.0: with debug or line information, kiln's binary is not
         # byte for byte cuda.core's (the debug information records how NVRTC was run), so cuda.core keeps them.
         "--device-debug": "debug information", "--generate-line-info": "line information"}
_KEPT_PREFIXES = {"--ptxas-options=": "ptxas_options", "--pre-include=": "pre_include",
                  "--dopt=": "device_code_optimize", "--create-pch=": "precompiled headers",
                  "--use-pch=": "precompiled headers", "--pch-dir=": "precompiled headers",
                  "--pch-verbose=": "precompiled headers", "--pch-messages=": "precompiled headers",
                  "--instantiate-templates-in-pch=": "precompiled headers",
                  "--time=": "time (writes a file)", "--fdevice-time-trace=": "fdevice_time_trace (writes a file)",
                  "--optimization-info=": "optimization_info", "--diag-": "diagnostic controls",
                  "--brief-diagnostics=": "brief_diagnostics", "--frandom-seed=": "frandom_seed",
                  "--Ofast-compile=": "ofast_compile", "--builtin-": "builtins switched off"}


def target_for(arch, target_type):
    """(kiln target, None) for ProgramOptions.arch and a target type, or (None, reason)."""
    match = _ARCH.match(arch or "")
    if not match:
        return None, f"arch {arch!r}: not sm_XY or compute_XY"
    kind, number, suffix = match.groups()
    if target_type == "cubin":
        if kind != "sm":
            return None, f"arch {arch} for cubin (NVRTC makes no cubin for a virtual arch)"
        return f"sm_{number}{suffix}", None
    if target_type == "ptx":
        return f"compute_{number}{suffix}", None
    return f"lto_{number}{suffix}", None  # ltoir


def translate_flags(flags, target_type):
    """(arch, kiln options, None) for cuda.core's NVRTC flags (str), or (None, None, reason) when one of them
    is not something this module passes to kiln."""
    arch = None
    lto = False
    out = []
    for flag in flags:
        if flag.startswith("-arch="):
            arch = flag[len("-arch="):]
        elif flag in _DROPPED:
            continue
        elif flag in _LTO:
            lto = True
            if target_type != "ltoir":
                return None, None, f"{flag} for {target_type}: link-time optimisation stays with cuda.core"
        elif flag in _PORTABLE:
            out.append(_PORTABLE[flag])
        elif flag in _RAW_EXACT or flag.startswith(_RAW_PREFIXES) or _MAX_REGISTERS.match(flag):
            out.append(flag)
        elif flag.startswith("--std="):
            standard = flag[len("--std="):]
            if standard not in _STANDARDS:
                return None, None, f"{flag}: kiln compiles C++17 or C++20 only"
            out.append("-std=" + standard)
        elif flag.startswith("--include-path="):
            if not flag[len("--include-path="):].strip():
                return None, None, f"{flag}: an include folder without a name"
            out.append(flag)
        elif flag.startswith("--define-macro="):
            body = flag[len("--define-macro="):]
            if not _MACRO_NAME.match(body.split("=", 1)[0]):
                return None, None, f"{flag}: not NAME or NAME=VALUE"
            out.append("-D" + body)
        elif flag.startswith("--undefine-macro="):
            name = flag[len("--undefine-macro="):]
            if not _MACRO_NAME.match(name):
                return None, None, f"{flag}: not a macro name"
            out.append("-U" + name)
        elif flag in _KEPT:
            return None, None, f"{flag}: {_KEPT[flag]} stays with cuda.core"
        else:
            for prefix, what in _KEPT_PREFIXES.items():
                if flag.startswith(prefix):
                    return None, None, f"{flag.split('=', 1)[0]}: {what} stays with cuda.core"
            return None, None, f"{flag.split('=', 1)[0]}: not an option kiln.cuda_core passes on"
    if arch is None:
        return None, None, "no -arch among cuda.core's flags"
    if target_type == "ltoir" and not lto:
        # NVRTC makes LTO-IR only with -dlto: without it cuda.core's compile says what is wrong.
        return None, None, "ltoir without link_time_optimization"
    if DEFAULT_DEVICE not in flags:
        out.append(NO_DEFAULT_DEVICE)
    return arch, out, None
