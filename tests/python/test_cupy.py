"""kiln.cupy against the stand-in CuPy (tests/python/stand_in): what reaches CuPy's Module is exactly
what kiln compiled, name mappings, fallbacks, compile errors, version refusal, disable."""

import io
import os
import subprocess
import sys

import pytest

import kiln
import kiln.cupy
from kiln import _native
from conftest import KERNELS, REPO, STAND_IN, subprocess_env

# CuPy's compiles as compile_with_cache assembles them: include folders, the standard, defines.
CUPY_LIKE_OPTIONS = ("--std=c++17", "-DCUPY_STAND_IN=1")


@pytest.fixture
def routed(stand_in_cupy, compile_api, cache_dir):
    """The stand-in CuPy with kiln.cupy enabled on an engine of a fresh cache."""
    engine = kiln.Engine(cache_dir=cache_dir)
    kiln.cupy.enable(engine)
    return stand_in_cupy, engine


def call(cupy, source=KERNELS, options=CUPY_LIKE_OPTIONS, arch=None, **kwargs):
    # As CuPy calls it: through _compile_module_with_cache, which looks the function up by name.
    return cupy.cuda.compiler._compile_module_with_cache(source, options, arch=arch, **kwargs)


def test_import_kiln_does_not_import_cupy():
    code = "import sys, kiln, kiln.cupy; assert 'cupy' not in sys.modules, 'cupy imported'; print('ok')"
    env = subprocess_env(PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), STAND_IN]), KILN_CUPY=None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_translate_options():
    ok, reason = kiln.cupy.translate_options(
        ("-I/x/cub", "--include-path=/y", "--std=c++17", "-std=c++20", "-DA=1", "-UB", "-ftz=true",
         "--use_fast_math", "-lineinfo", "--generate-line-info", "-G", "-fmad=false", "-maxrregcount=64",
         "--device-as-default-execution-space", "--pch"))
    assert reason is None
    assert ok == ["-I/x/cub", "--include-path=/y", "-std=c++17", "-std=c++20", "-DA=1", "-UB", "-ftz=true",
                  "--fast-math", "--line-info", "--line-info", "--device-debug", "--no-fma", "-maxrregcount=64"]
    for refused in ("-dc", "-rdc=true", "--relocatable-device-code=true", "-dlto", "--std=c++14", "-Xptxas=-v",
                    "--some-future-flag", "-I", "-UB=1"):
        out, reason = kiln.cupy.translate_options(("-DX", refused))
        assert out is None and refused in reason, (refused, reason)


def test_routed_module_gets_kiln_cubin(routed):
    cupy, engine = routed
    # kiln.cupy compiles CuPy's code under one source name (part of the request, as the file name __FILE__ gives).
    expected = engine.compile(kiln.Source.from_text(KERNELS, name=kiln.cupy.SOURCE_NAME),
                              options=["-std=c++17", "-DCUPY_STAND_IN=1", "-ftz=true"], target="sm_90")
    module = call(cupy)
    assert isinstance(module, cupy.cuda.function.Module)
    assert module.image == expected.data and module.image[:4] == b"\x7fELF"  # exactly kiln's CUBIN for sm_90
    assert module.mapping_calls == []  # no name expressions: CuPy's Module keeps mapping None
    assert cupy.cuda.compiler.calls == []  # CuPy's own compiler never ran
    stats = kiln.cupy.stats()
    assert stats["routed"] == {"memory": 1} and stats["fallbacks"] == {}
    assert stats["seconds"]["kiln"] > 0 and stats["seconds"]["load"] > 0  # the routed call was timed
    kiln.cupy.reset_stats()
    assert kiln.cupy.stats()["seconds"] == {"python": 0.0, "kiln": 0.0, "load": 0.0}


def test_name_expressions_mapping(routed):
    cupy, engine = routed
    names = ("py_scale<float>", "py_scale<double>")
    module = call(cupy, name_expressions=names)
    binary = engine.compile(KERNELS, options=["-std=c++17", "-DCUPY_STAND_IN=1", "-ftz=true"], names=list(names),
                            target="sm_90")
    assert module.image == binary.data
    assert module.mapping_calls == [binary.lowered_names]
    assert set(module.mapping) == set(names)
    assert all(symbol.startswith("_Z") for symbol in module.mapping.values())
    assert kiln.cupy.stats()["routed"] == {"compiled": 1}


def test_include_folders_reach_kiln(routed, tmp_path):
    # CuPy hands every compile its include folders (-I...); kiln resolves the headers in them itself.
    cupy, engine = routed
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "defs.cuh").write_text("#pragma once\n#define BENCH_VALUE 7\n")
    source = '#include <bench/defs.cuh>\nextern "C" __global__ void k(int* out) { *out = BENCH_VALUE; }\n'
    options = ("-I" + str(tmp_path), "--std=c++17")
    module = call(cupy, source=source, options=options)
    expected = engine.compile(kiln.Source.from_text(source, name=kiln.cupy.SOURCE_NAME),
                              ["-I" + str(tmp_path), "-std=c++17", "-ftz=true"], target="sm_90")
    assert module.image == expected.data and expected.origin == "memory"
    assert cupy.cuda.compiler.calls == []


def test_explicit_arch_and_ptx(routed, monkeypatch):
    cupy, _engine = routed
    module = call(cupy, arch="80")
    assert module.image[:4] == b"\x7fELF"
    monkeypatch.setattr(cupy.cuda.compiler, "_use_ptx", True)
    module = call(cupy)
    assert module.image.endswith(b"\0") and b".target sm_90" in module.image  # PTX, NUL-terminated for the driver
    assert cupy.cuda.compiler.calls == []


def test_arch_decided_without_loading_nvrtc(routed):
    # CuPy asks NVRTC its version (loading NVRTC) to decide the arch; kiln serves from its cache without
    # NVRTC, so for a device no NVRTC is too old for it decides by CuPy's rule without asking.
    cupy, _engine = routed
    module = call(cupy)
    assert module.image[:4] == b"\x7fELF" and cupy.cuda.compiler.nvrtc_loads == 0
    assert cupy.cuda.compiler._nvrtc_version is None


@pytest.mark.parametrize("capability", ["53", "75", "87", "90", "100", "120", "121"])
@pytest.mark.parametrize("version", [(12, 0), (12, 8), (13, 0)])
@pytest.mark.parametrize("use_ptx", [False, True])
@pytest.mark.parametrize("arch", [None, "80", "90", "120"])
def test_arch_flag_agrees_with_cupy(stand_in_cupy, monkeypatch, capability, version, use_ptx, arch):
    compiler = stand_in_cupy.cuda.compiler
    monkeypatch.setattr(stand_in_cupy.cuda.device, "STAND_IN_CAPABILITY", capability)
    monkeypatch.setattr(compiler, "STAND_IN_NVRTC_VERSION", version)
    monkeypatch.setattr(compiler, "_use_ptx", use_ptx)
    for loaded in (False, True):  # before and after CuPy loaded NVRTC
        monkeypatch.setattr(compiler, "_nvrtc_version", version if loaded else None)
        ours = kiln.cupy._arch_flag(compiler, arch)
        monkeypatch.setattr(compiler, "_nvrtc_version", None)
        cupys = compiler._get_arch_for_options_for_nvrtc(arch if arch is not None else compiler._get_arch())[0]
        assert ours == cupys, (loaded, capability, version, use_ptx, arch)


def test_log_stream_and_debug_env(routed, monkeypatch):
    cupy, _engine = routed
    monkeypatch.setenv("CUPY_CUDA_COMPILE_WITH_DEBUG", "1")
    stream = io.StringIO()
    module = call(cupy, log_stream=stream)
    assert module.image[:4] == b"\x7fELF"
    assert isinstance(stream.getvalue(), str)
    assert cupy.cuda.compiler.calls == []


@pytest.mark.parametrize("kwargs, options, reason", [
    ({"backend": "nvcc"}, CUPY_LIKE_OPTIONS, "backend nvcc"),
    ({"jitify": True}, CUPY_LIKE_OPTIONS, "jitify"),
    ({}, CUPY_LIKE_OPTIONS + ("-DCUPY_USE_JITIFY",), "jitify"),
    ({}, CUPY_LIKE_OPTIONS + ("-rdc=true",), "-rdc=true: relocatable device code / LTO stays with CuPy"),
    ({}, CUPY_LIKE_OPTIONS + ("--std=c++14",), "--std=c++14: kiln compiles C++17 or C++20 only"),
    ({}, CUPY_LIKE_OPTIONS + ("--unknown-flag",), "--unknown-flag: not an option kiln.cupy passes on"),
])
def test_fallbacks_call_the_original(routed, kwargs, options, reason):
    cupy, _engine = routed
    result = call(cupy, options=options, **kwargs)
    calls = cupy.cuda.compiler.calls
    assert len(calls) == 1
    assert calls[0]["options"] == options  # the original gets CuPy's options untouched
    for key, value in kwargs.items():
        assert calls[0][key] == value
    if not kwargs.get("to_ltoir"):
        assert result.image == b"stand-in: compiled by the original"
    assert kiln.cupy.stats()["fallbacks"] == {reason: 1}


def test_cache_in_memory_falls_back(routed):
    cupy, _engine = routed
    cupy.cuda.compiler._compile_with_cache_cuda(KERNELS, CUPY_LIKE_OPTIONS, None, cache_in_memory=True)
    assert cupy.cuda.compiler.calls[0]["cache_in_memory"] is True
    assert kiln.cupy.stats()["fallbacks"] == {"CUPY_CACHE_IN_MEMORY=1": 1}


def test_kiln_refusal_falls_back_with_a_warning(routed):
    cupy, _engine = routed
    with pytest.warns(RuntimeWarning, match="KILN_ERROR_CONFIG"):
        module = call(cupy, options=CUPY_LIKE_OPTIONS + ("-I/no/such/folder/for/kiln",))
    assert module.image == b"stand-in: compiled by the original"
    (reason,) = kiln.cupy.stats()["fallbacks"]
    assert reason.startswith("kiln: KILN_ERROR_CONFIG")


def test_header_only_in_the_working_directory_falls_back_to_cupy(routed, tmp_path, monkeypatch):
    # NVRTC (as CuPy calls it) finds a quoted include next to the source, in the working directory;
    # kiln searches only the include folders (it cannot key what the compiler reads on its own), so
    # such a kernel goes to CuPy, which compiles it as it always has.
    cupy, _engine = routed
    (tmp_path / "here.h").write_text("#define VALUE 3\n")
    monkeypatch.chdir(tmp_path)
    source = '#include "here.h"\nextern "C" __global__ void k(int* p) { *p = VALUE; }\n'
    with pytest.warns(RuntimeWarning, match="here.h"):
        module = call(cupy, source=source)
    assert module.image == b"stand-in: compiled by the original"
    (reason,) = kiln.cupy.stats()["fallbacks"]
    assert "working directory" in reason
    assert kiln.cupy.stats()["compile_errors"] == 0


def test_compile_error_is_cupys_compile_exception(routed, monkeypatch, capsys):
    cupy, _engine = routed
    bad = "extern \"C\" __global__ void k() { surely_not_declared; }\n"
    monkeypatch.setenv("CUPY_DUMP_CUDA_SOURCE_ON_ERROR", "1")
    with pytest.raises(cupy.cuda.compiler.CompileException) as caught:
        call(cupy, source=bad)
    error = caught.value
    assert "surely_not_declared" in str(error) and "surely_not_declared" in error.get_message()
    assert error.source == bad and error.backend == "nvrtc" and error.name == kiln.cupy.SOURCE_NAME
    assert "-arch=sm_90" in error.options and "-ftz=true" in error.options
    assert "stand-in dump" in capsys.readouterr().err
    assert kiln.cupy.stats()["compile_errors"] == 1
    assert cupy.cuda.compiler.calls == []


def test_enable_twice_and_disable_restores(stand_in_cupy, compile_api):
    compiler = stand_in_cupy.cuda.compiler
    original = compiler._compile_with_cache_cuda
    kiln.cupy.enable()
    replaced = compiler._compile_with_cache_cuda
    assert replaced is not original and kiln.cupy.enabled()
    kiln.cupy.enable()
    assert compiler._compile_with_cache_cuda is replaced
    kiln.cupy.disable()
    assert compiler._compile_with_cache_cuda is original and not kiln.cupy.enabled()
    kiln.cupy.disable()
    assert compiler._compile_with_cache_cuda is original
    # Something that kept the replacement behaves as CuPy once disabled.
    module = replaced(KERNELS, CUPY_LIKE_OPTIONS, None)
    assert module.image == b"stand-in: compiled by the original"


def test_unsupported_version_is_refused(stand_in_cupy, monkeypatch):
    compiler = stand_in_cupy.cuda.compiler
    original = compiler._compile_with_cache_cuda
    for version in ("14.1.0", "15.0.0", "13.6.4", "weird"):
        monkeypatch.setattr(stand_in_cupy, "__version__", version)
        with pytest.raises(kiln.Error, match=f"supports CuPy 14.2.x; this is CuPy {version}"):
            kiln.cupy.enable()
        assert compiler._compile_with_cache_cuda is original and not kiln.cupy.enabled()
    monkeypatch.setattr(stand_in_cupy, "__version__", "14.2.1")
    if kiln.api_version() >= _native.COMPILE_API_VERSION:
        kiln.cupy.enable()
        assert kiln.cupy.enabled()


def test_changed_internals_are_refused(stand_in_cupy, monkeypatch):
    compiler = stand_in_cupy.cuda.compiler

    def different(source, options, arch, extra_source=None, backend="nvrtc"):
        return None

    monkeypatch.setattr(compiler, "_compile_with_cache_cuda", different)
    with pytest.raises(kiln.Error, match="not the one kiln.cupy was written for"):
        kiln.cupy.enable()
    assert compiler._compile_with_cache_cuda is different
    monkeypatch.undo()
    monkeypatch.delattr(stand_in_cupy.cuda.function.Module, "_set_mapping")
    with pytest.raises(kiln.Error, match="Module._set_mapping"):
        kiln.cupy.enable()


def test_old_library_is_refused(stand_in_cupy, monkeypatch):
    library, path, _version = _native.load()
    monkeypatch.setattr(_native, "_loaded", (library, path, 1))
    original = stand_in_cupy.cuda.compiler._compile_with_cache_cuda
    with pytest.raises(kiln.LibraryError, match="kiln_compile"):
        kiln.cupy.enable()
    assert stand_in_cupy.cuda.compiler._compile_with_cache_cuda is original


def _child(code, **env):
    env.setdefault("PYTHONPATH", os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]))
    return subprocess.run([sys.executable, "-c", code], env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=120)


def test_env_switch_enables_when_cupy_is_imported(compile_api):
    code = ("import sys, kiln, kiln.cupy\n"
            "assert 'cupy' not in sys.modules\n"
            "import cupy\n"
            "assert cupy.cuda.compiler._compile_with_cache_cuda is kiln.cupy._compile_with_cache_cuda\n"
            "assert type(cupy.__spec__.loader).__name__ != '_CuPyLoader'\n"
            "assert not any(type(f).__name__ == 'ImportFinder' for f in sys.meta_path)\n"
            "print('enabled', kiln.cupy.enabled())\n")
    result = _child(code, KILN_CUPY="1")
    assert result.returncode == 0 and result.stdout.strip() == "enabled True", result.stderr
    # CuPy imported first, kiln second: enabled at `import kiln`.
    result = _child("import cupy, kiln, kiln.cupy; print('enabled', kiln.cupy.enabled())", KILN_CUPY="1")
    assert result.returncode == 0 and result.stdout.strip() == "enabled True", result.stderr
    # Off unless 1; other values warn.
    result = _child("import cupy, kiln, kiln.cupy; print('enabled', kiln.cupy.enabled())", KILN_CUPY="0")
    assert result.stdout.strip() == "enabled False", result.stderr
    result = _child("import cupy, kiln, kiln.cupy; print('enabled', kiln.cupy.enabled())", KILN_CUPY="yes")
    assert result.stdout.strip() == "enabled False" and "KILN_CUPY='yes' ignored" in result.stderr


def test_env_switch_warns_for_unsupported_cupy(compile_api):
    code = "import kiln, kiln.cupy, cupy; print('enabled', kiln.cupy.enabled(), cupy.__version__)"
    result = _child(code, KILN_CUPY="1", CUPY_STAND_IN_VERSION="13.6.0")
    assert result.returncode == 0, result.stderr  # the program runs on, with CuPy's own compiler
    assert result.stdout.strip() == "enabled False 13.6.0"
    assert "KILN_CUPY=1: CuPy keeps its own compiler" in result.stderr and "supports CuPy 14.2.x" in result.stderr


def test_runner_runs_a_program_with_kiln(compile_api, tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import sys, cupy, kiln.cupy\n"
                       "assert cupy.cuda.compiler._compile_with_cache_cuda is kiln.cupy._compile_with_cache_cuda\n"
                       "print('argv', sys.argv[1:], 'enabled', kiln.cupy.enabled())\n"
                       "sys.exit(3)\n")
    env = subprocess_env(PYTHONPATH=os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]))
    result = subprocess.run([sys.executable, "-m", "kiln.cupy", str(program), "a", "--b"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == "argv ['a', '--b'] enabled True"
    usage = subprocess.run([sys.executable, "-m", "kiln.cupy"], env=env, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_runner_says_the_prefix_once(stand_in_cupy, monkeypatch, capsys):
    # enable()'s messages mostly start with "kiln.cupy" already; the runner used to add its own in front.
    from kiln.cupy.__main__ import main
    monkeypatch.delattr(stand_in_cupy.cuda.function.Module, "_set_mapping")
    assert main(["program.py"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("kiln.cupy: CuPy ") and "has no cupy.cuda.function.Module._set_mapping" in said, said
    assert said.count("kiln.cupy") == 1, said
    monkeypatch.undo()
    # A message of kiln's own (no prefix yet) gets it, once.
    library, path, _version = _native.load()
    monkeypatch.setattr(_native, "_loaded", (library, path, 1))
    assert main(["program.py"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("kiln.cupy (kiln_compile) needs kiln API version 2"), said
    assert said.count("kiln.cupy") == 1, said


def test_nul_byte_in_cupy_source_falls_back(routed):
    # kiln takes C strings: a source holding a NUL byte is refused (ValueError), and CuPy compiles it itself.
    cupy, _engine = routed
    with pytest.warns(RuntimeWarning, match="kiln: ValueError: source holds a NUL byte"):
        module = call(cupy, source=KERNELS + "\0 // after the NUL byte")
    assert module.image == b"stand-in: compiled by the original"
    (reason,) = kiln.cupy.stats()["fallbacks"]
    assert reason.startswith("kiln: ValueError: source holds a NUL byte")


def test_lto_ir_requests_are_served_as_bytes(routed):
    # cupyx.jit's device functions ask for LTO-IR (to_ltoir=True): CuPy returns its bytes for a link step.
    cupy, _engine = routed
    if kiln.api_version() < 5:
        pytest.skip("libkiln without lto_XY targets")
    stream = io.StringIO()
    result = call(cupy, log_stream=stream, to_ltoir=True)
    assert isinstance(result, bytes) and result[:4] == b"\xed\x43\x4e\x7f"  # NVRTC's LTO-IR
    assert cupy.cuda.compiler.calls == []
    assert kiln.cupy.stats()["routed"] == {"compiled": 1}
    assert call(cupy, to_ltoir=True) == result  # the same request again: kiln's memory tier
    assert kiln.cupy.stats()["routed"] == {"compiled": 1, "memory": 1}
