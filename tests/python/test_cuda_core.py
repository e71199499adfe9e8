"""kiln.cuda_core against the stand-in cuda.core (tests/python/stand_in/cuda/core): what comes back from
Program.compile is exactly what kiln compiled, as the ObjectCode cuda.core returns (symbol mapping,
name, PTX's NUL); include folders keyed by content; fallbacks to cuda.core's own compile with their
reasons; compile errors as cuda.core's NVRTCError; version and internals refusal; disable; the
KILN_CUDA_CORE switch and the runner. Compiles are real NVRTC compiles for sm_90 / compute_90 (no GPU)."""

import io
import os
import subprocess
import sys

import pytest

import kiln
import kiln.cuda_core
from kiln import _native
from conftest import KERNELS, REPO, STAND_IN, subprocess_env

PLAIN = 'extern "C" __global__ void plain(int* out) { *out = 1; }\n'


def calls(core):
    return sys.modules["cuda.core._program"].calls


def options(core, **fields):
    fields.setdefault("arch", "sm_90")
    return core.ProgramOptions(**fields)


def kiln_binary(engine, code, kiln_options=(), names=(), target="sm_90", name="default_program", default_device=False):
    """What kiln compiles for cuda.core's request: without device_as_default_execution_space (default_device),
    cuda.core's NVRTC gets no -default-device, so neither does kiln's (--no-default-device)."""
    extra = [] if default_device else ["--no-default-device"]
    return engine.compile(kiln.Source.from_text(code, name=name), list(kiln_options) + extra, list(names), target)


def test_import_kiln_does_not_import_cuda_core():
    code = ("import sys, kiln, kiln.cuda_core\n"
            "assert 'cuda.core' not in sys.modules and 'cuda' not in sys.modules, 'cuda imported'\nprint('ok')")
    env = subprocess_env(PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), STAND_IN]), KILN_CUDA_CORE=None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_translate_flags():
    flags = ["-arch=sm_90", "--relocatable-device-code=false", "--maxrregcount=64", "--ftz=true", "--prec-sqrt=false", "--prec-div=false", "--fmad=false",
             "--use_fast_math", "--extra-device-vectorization", "--define-macro=A", "--define-macro=B=2",
             "--undefine-macro=C", "--include-path=/x/y", "--no-source-include", "--std=c++20",
             "--builtin-move-forward=true", "--builtin-initializer-list=true", "--disable-warnings", "--restrict",
             "--device-as-default-execution-space", "--device-int128", "--split-compile=4", "--minimal"]
    arch, out, reason = kiln.cuda_core.translate_flags(flags, "cubin")
    assert reason is None and arch == "sm_90"
    assert out == ["--maxrregcount=64", "--ftz=true", "--prec-sqrt=false",
                   "--prec-div=false", "--no-fma", "--fast-math", "--extra-device-vectorization", "-DA", "-DB=2",
                   "-UC", "--include-path=/x/y", "-std=c++20", "--disable-warnings", "--restrict",
                   "-device-int128", "--split-compile=4", "--minimal"]
    # Without device_as_default_execution_space cuda.core's NVRTC gets no -default-device: kiln is told to add none.
    assert kiln.cuda_core.translate_flags(["-arch=sm_90", "--fmad=true"], "ptx")[1] == ["--fmad=true",
                                                                                         "--no-default-device"]
    assert kiln.cuda_core.translate_flags(["-arch=sm_90", "--relocatable-device-code=true"], "cubin")[1] == [
        "--relocatable-device-code", "--no-default-device"]
    for refused, said in (                          ("--extensible-whole-program", "whole-program"), ("--std=c++14", "C++17 or C++20"),
                          ("--ptxas-options=-v", "ptxas_options"), ("--pre-include=a.h", "pre_include"),
                          ("--dopt=on", "device_code_optimize"), ("--pch", "precompiled headers"),
                          ("--use-pch=x.pch", "precompiled headers"), ("--time=t.csv", "writes a file"),
                          ("--diag-suppress=177", "diagnostic"), ("--builtin-move-forward=false", "builtins"),
                          ("--no-cache", "no_cache"), ("--device-debug", "debug information"),
                          ("--generate-line-info", "line information"), ("--dlink-time-opt", "link-time optimisation"),
                          ("--include-path= ", "without a name"), ("--define-macro=1X", "NAME"),
                          ("--some-future-flag", "not an option kiln.cuda_core passes on")):
        arch, out, reason = kiln.cuda_core.translate_flags(["-arch=sm_90", "--define-macro=X", refused], "cubin")
        assert out is None and said in reason, (refused, reason)
    assert kiln.cuda_core.translate_flags(["--std=c++17"], "cubin")[2] == "no -arch among cuda.core's flags"
    assert kiln.cuda_core.translate_flags(["-arch=sm_90"], "ltoir")[2] == "ltoir without link_time_optimization"
    assert kiln.cuda_core.translate_flags(["-arch=sm_90", "--dlink-time-opt"], "ltoir")[1] == ["--no-default-device"]


def test_target_for():
    assert kiln.cuda_core.target_for("sm_90", "cubin") == ("sm_90", None)
    assert kiln.cuda_core.target_for("sm_90a", "cubin") == ("sm_90a", None)
    assert kiln.cuda_core.target_for("sm_90", "ptx") == ("compute_90", None)
    assert kiln.cuda_core.target_for("compute_80", "ptx") == ("compute_80", None)
    assert kiln.cuda_core.target_for("sm_100", "ltoir") == ("lto_100", None)
    assert kiln.cuda_core.target_for("compute_90", "cubin")[0] is None
    assert kiln.cuda_core.target_for("gfx90a", "cubin")[0] is None


def test_routed_cubin_is_kilns(routed):
    core, engine = routed
    program = core.Program(KERNELS, "c++", options(core, std="c++17", name="mine.cu"))
    assert isinstance(program, sys.modules["cuda.core._program"].Program)  # still cuda.core's Program
    result = program.compile("cubin")
    expected = kiln_binary(engine, KERNELS, ["-std=c++17"], name="mine.cu")
    assert isinstance(result, core.ObjectCode) and result.code_type == "cubin" and result.name == "mine.cu"
    assert result.code == expected.data and result.code[:4] == b"\x7fELF" and expected.origin == "memory"
    assert result.symbol_mapping == {}
    assert result.get_kernel("py_fill").symbol == b"py_fill"  # an extern "C" kernel by its own name
    assert calls(core) == []  # cuda.core's own compile never ran
    stats = kiln.cuda_core.stats()
    assert stats["routed"] == {"compiled": 1} and stats["fallbacks"] == {} and stats["compile_errors"] == 0
    assert stats["seconds"]["kiln"] > 0 and stats["engine"]["compiles"] >= 1
    program.compile("cubin")
    assert kiln.cuda_core.stats()["routed"] == {"compiled": 1, "memory": 1}


def test_options_none_takes_the_device_arch(routed, monkeypatch):
    core, engine = routed
    monkeypatch.setattr(sys.modules["cuda.core._device"], "STAND_IN_ARCH", "80")
    result = core.Program(PLAIN, "c++").compile("cubin")  # ProgramOptions() asks Device().arch, as cuda.core
    assert result.code == kiln_binary(engine, PLAIN, target="sm_80").data
    result = core.Program(PLAIN, "c++", {"arch": "sm_90", "name": "d.cu"}).compile("cubin")  # a dict, as cuda.core
    assert result.code == kiln_binary(engine, PLAIN, name="d.cu").data and result.name == "d.cu"
    assert calls(core) == []


def test_name_expressions_map_to_lowered_names(routed):
    core, engine = routed
    names = ("py_scale<float>", b"py_scale<double>")  # cuda.core takes str or bytes name expressions
    result = core.Program(KERNELS, "c++", options(core)).compile("cubin", name_expressions=names)
    binary = kiln_binary(engine, KERNELS, names=["py_scale<float>", "py_scale<double>"])
    assert result.code == binary.data
    # As cuda.core's own: each name expression, as given, to NVRTC's lowered name as bytes.
    assert result.symbol_mapping == {"py_scale<float>": binary.lowered_names["py_scale<float>"].encode(),
                                     b"py_scale<double>": binary.lowered_names["py_scale<double>"].encode()}
    assert all(symbol.startswith(b"_Z") for symbol in result.symbol_mapping.values())
    kernel = result.get_kernel("py_scale<float>")  # found in the cubin's bytes through the mapping
    assert kernel.symbol == binary.lowered_names["py_scale<float>"].encode()
    with pytest.raises(Exception, match="not found"):
        result.get_kernel("py_scale<int>")  # never instantiated: the stand-in finds no such symbol
    assert calls(core) == []


def test_ptx_is_served_with_its_nul(routed):
    core, engine = routed
    result = core.Program(KERNELS, "c++", options(core)).compile("ptx", name_expressions=["py_scale<float>"])
    binary = kiln_binary(engine, KERNELS, names=["py_scale<float>"], target="compute_90")
    # NVRTC's PTX, as cuda.core returns it, ends with one NUL (kiln's PTX may carry it already).
    assert result.code_type == "ptx" and result.code.rstrip(b"\0") == binary.data.rstrip(b"\0")
    assert result.code.endswith(b"\0") and not result.code.endswith(b"\0\0")
    assert b".target sm_90" in result.code and result.get_kernel("py_scale<float>")
    result = core.Program(PLAIN, "c++", options(core, arch="compute_80")).compile("ptx")
    assert b".target sm_80" in result.code
    assert calls(core) == [] and kiln.cuda_core.stats()["routed"] == {"compiled": 2}


def test_options_reach_kiln(routed):
    core, engine = routed
    source = ("#if A != 3 || !defined(B) || defined(C)\n#error macros did not arrive\n#endif\n"
              "#if __cplusplus < 202002L\n#error not C++20\n#endif\n" + KERNELS)
    chosen = options(core, define_macro=[("A", "3"), "B", "C"], undefine_macro="C", std="c++20",
                     use_fast_math=True, ftz=True, prec_div=False, prec_sqrt=False, fma=False,
                     max_register_count=64, restrict=True, device_as_default_execution_space=True)
    result = core.Program(source, "c++", chosen).compile("cubin")
    expected = kiln_binary(engine, source, ["--maxrregcount=64", "--ftz=true", "--prec-sqrt=false",
                                            "--prec-div=false", "--no-fma", "--fast-math", "-DA=3", "-DB", "-DC",
                                            "-UC", "-std=c++20", "--restrict"], default_device=True)
    assert result.code == expected.data and expected.origin == "memory"
    assert calls(core) == []


def test_include_path_headers_are_keyed_by_content(core, compile_api, tmp_path, cache_dir):
    (tmp_path / "inc" / "lib").mkdir(parents=True)
    header = tmp_path / "inc" / "lib" / "value.cuh"
    header.write_text("#pragma once\n#define LIB_VALUE 7\n")
    source = '#include <lib/value.cuh>\nextern "C" __global__ void k(int* out) { *out = LIB_VALUE; }\n'

    def compile_with(engine):
        kiln.cuda_core.enable(engine)
        program = core.Program(source, "c++", options(core, include_path=[str(tmp_path / "inc")]))
        return program.compile("cubin"), kiln.cuda_core.stats()["routed"]

    first, routed_so_far = compile_with(kiln.Engine(cache_dir=cache_dir))
    assert routed_so_far == {"compiled": 1}
    again, routed_so_far = compile_with(kiln.Engine(cache_dir=cache_dir))  # a new engine: from the disk cache
    assert again.code == first.code and routed_so_far == {"compiled": 1, "disk": 1}
    # A new process on the same cache: the header is unchanged, so no compile.
    code = ("import sys, kiln, kiln.cuda_core, cuda.core as c\n"
            f"kiln.cuda_core.enable(kiln.Engine(cache_dir={cache_dir!r}))\n"
            f"p = c.Program({source!r}, 'c++', c.ProgramOptions(arch='sm_90', include_path=[{str(tmp_path / 'inc')!r}]))\n"
            "sys.stdout.buffer.write(p.compile('cubin').code[:4]); print(kiln.cuda_core.stats()['routed'])\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                           env=subprocess_env(PYTHONPATH=os.pathsep.join([STAND_IN, os.path.join(REPO, "python")])))
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout == b"\x7fELF{'disk': 1}\n"
    header.write_text("#pragma once\n#define LIB_VALUE 8\n")  # an edited header: a new compile, another binary
    edited, routed_so_far = compile_with(kiln.Engine(cache_dir=cache_dir))
    assert edited.code != first.code and routed_so_far == {"compiled": 2, "disk": 1}
    assert calls(core) == []


class _Cache:
    """A caller's program cache (cuda.core's duck-typed get / __setitem__)."""

    def __init__(self):
        self.store = {}

    def get(self, key, default=None):
        return self.store.get(key, default)

    def __setitem__(self, key, value):
        self.store[key] = value


@pytest.mark.parametrize("code_type, fields, target_type, reason", [
    ("ptx", {}, "cubin", "code_type ptx"),
    ("nvvm", {}, "ptx", "code_type nvvm"),
    ("c++", {"pre_include": "a.h"}, "cubin", "--pre-include: pre_include stays with cuda.core"),
    ("c++", {"std": "c++14"}, "cubin", "--std=c++14: kiln compiles C++17 or C++20 only"),
    ("c++", {"ptxas_options": ["-v"]}, "cubin", "--ptxas-options: ptxas_options stays with cuda.core"),
    ("c++", {"create_pch": "x.pch"}, "cubin", "--create-pch: precompiled headers stays with cuda.core"),
    ("c++", {"link_time_optimization": True}, "cubin",
     "--dlink-time-opt for cubin: link-time optimisation stays with cuda.core"),
    ("c++", {}, "ltoir", "ltoir without link_time_optimization"),
    ("c++", {"arch": "compute_90"}, "cubin", "arch compute_90 for cubin (NVRTC makes no cubin for a virtual arch)"),
])
def test_fallbacks_call_cuda_cores_compile(routed, code_type, fields, target_type, reason):
    core, _engine = routed
    chosen = options(core, **fields)
    logs = io.StringIO()
    result = core.Program(PLAIN, code_type, chosen).compile(target_type, ("plain",), logs)
    (call,) = calls(core)
    assert call["code_type"] == code_type and call["options"] is chosen and call["target_type"] == target_type
    assert call["name_expressions"] == ("plain",) and call["logs"] is logs and call["cache"] is None
    assert result.code.startswith(b"stand-in: compiled by cuda.core")
    assert result.symbol_mapping == {"plain": b"original_plain"}
    assert kiln.cuda_core.stats()["fallbacks"] == {reason: 1} and kiln.cuda_core.stats()["routed"] == {}


def test_cache_argument_stays_with_cuda_core(routed, tmp_path):
    core, _engine = routed
    cache = _Cache()
    result = core.Program(PLAIN, "c++", options(core)).compile("cubin", cache=cache)
    assert result.code.startswith(b"stand-in: compiled by cuda.core") and len(cache.store) == 1
    assert calls(core)[0]["cache"] is cache
    # cuda.core's own refusal reaches the caller untouched (its cache cannot key include folders).
    program = core.Program(PLAIN, "c++", options(core, include_path=[str(tmp_path)]))
    with pytest.raises(ValueError, match="extra_digest"):
        program.compile("cubin", cache=cache)
    assert kiln.cuda_core.stats()["fallbacks"] == {"cache= given: cuda.core's own program cache": 2}


def test_unknown_target_type_gets_cuda_cores_error(routed):
    core, _engine = routed
    with pytest.raises(ValueError, match="Unsupported target_type"):
        core.Program(PLAIN, "c++", options(core)).compile("fatbin")
    assert kiln.cuda_core.stats()["fallbacks"] == {"target_type 'fatbin'": 1}


def test_an_option_cuda_core_adds_later_falls_back(routed, monkeypatch):
    core, _engine = routed
    spelled = core.ProgramOptions.as_bytes
    monkeypatch.setattr(core.ProgramOptions, "as_bytes", lambda self, *a: spelled(self, *a) + [b"--future=1"])
    result = core.Program(PLAIN, "c++", options(core)).compile("cubin")
    assert result.code.startswith(b"stand-in: compiled by cuda.core")
    assert kiln.cuda_core.stats()["fallbacks"] == {"--future: not an option kiln.cuda_core passes on": 1}


def test_ltoir_goes_to_cuda_core_until_libkiln_has_lto(routed):
    core, _engine = routed
    chosen = options(core, link_time_optimization=True)
    result = core.Program(PLAIN, "c++", chosen).compile("ltoir")
    stats = kiln.cuda_core.stats()
    if stats["ltoir_in_kiln"]:  # a libkiln with the lto_XY target: served by kiln
        assert result.code_type == "ltoir" and not result.code.startswith(b"stand-in")
        assert calls(core) == []
        return
    assert stats["ltoir_in_kiln"] is False and result.code.startswith(b"stand-in: compiled by cuda.core ltoir")
    core.Program(PLAIN, "c++", chosen).compile("ltoir")  # found once: the second request does not ask kiln
    reason = "ltoir: the loaded libkiln has no LTO-IR target (lto_XY)"
    assert kiln.cuda_core.stats()["fallbacks"] == {reason: 2} and len(calls(core)) == 2
    assert kiln.cuda_core.stats()["engine"]["compiles"] == 0


def test_kiln_refusal_falls_back_with_a_warning(routed):
    core, _engine = routed
    program = core.Program(PLAIN, "c++", options(core, include_path="/no/such/folder/for/kiln"))
    with pytest.warns(RuntimeWarning, match="KILN_ERROR_CONFIG"):
        result = program.compile("cubin")
    assert result.code.startswith(b"stand-in: compiled by cuda.core")
    (reason,) = kiln.cuda_core.stats()["fallbacks"]
    assert reason.startswith("kiln: KILN_ERROR_CONFIG")
    with pytest.warns(RuntimeWarning, match="kiln: ValueError: source holds a NUL byte"):
        core.Program(PLAIN + "\0 // after", "c++", options(core)).compile("cubin")
    assert len(calls(core)) == 2


def test_header_next_to_the_source_falls_back(routed, tmp_path, monkeypatch):
    core, _engine = routed
    (tmp_path / "here.h").write_text("#define VALUE 3\n")
    monkeypatch.chdir(tmp_path)
    source = '#include "here.h"\nextern "C" __global__ void k(int* p) { *p = VALUE; }\n'
    with pytest.warns(RuntimeWarning, match="here.h"):
        result = core.Program(source, "c++", options(core)).compile("cubin")
    assert result.code.startswith(b"stand-in: compiled by cuda.core")
    (reason,) = kiln.cuda_core.stats()["fallbacks"]
    assert "source's folder" in reason and kiln.cuda_core.stats()["compile_errors"] == 0


def test_compile_error_is_cuda_cores_nvrtc_error(routed):
    core, _engine = routed
    from cuda.core._utils.cuda_utils import NVRTCError
    logs = io.StringIO()
    bad = 'extern "C" __global__ void k() { surely_not_declared; }\n'
    with pytest.raises(NVRTCError) as caught:
        core.Program(bad, "c++", options(core, name="bad.cu")).compile("cubin", logs=logs)
    message = str(caught.value)
    assert message.startswith("6: NVRTC_ERROR_COMPILATION, compilation log:\n\n")
    assert "surely_not_declared" in message and "bad.cu" in message
    assert logs.getvalue() == ""  # as cuda.core: the log goes into the error
    assert kiln.cuda_core.stats()["compile_errors"] == 1 and calls(core) == []


def test_logs_get_the_compiler_log(routed):
    core, engine = routed
    noisy = 'extern "C" __global__ void k(int* out) { int unused_here; *out = 1; }\n'
    logs = io.StringIO()
    core.Program(noisy, "c++", options(core)).compile("cubin", logs=logs)
    binary_log = kiln_binary(kiln.Engine(cache_disable=True), noisy).log
    assert "unused_here" in logs.getvalue() and logs.getvalue() == binary_log
    cached = io.StringIO()
    core.Program(noisy, "c++", options(core)).compile("cubin", logs=cached)
    assert cached.getvalue() == ""  # served from kiln's cache: nothing compiled, nothing logged
    assert calls(core) == []


def test_enable_twice_and_disable_restores(core, compile_api):
    original = core.Program
    with pytest.raises(TypeError, match="immutable"):
        original.compile = None  # a Cython extension type: kiln.cuda_core cannot patch the method
    kiln.cuda_core.enable()
    routed_class = core.Program
    assert routed_class is not original and issubclass(routed_class, original) and kiln.cuda_core.enabled()
    # The module cuda.core defines it in too: cuda.core's own tests and numba-cuda import it from there.
    import cuda.core._program as program_module
    assert program_module.Program is routed_class
    kiln.cuda_core.enable()
    assert core.Program is routed_class
    made_while_enabled = core.Program(PLAIN, "c++", options(core))
    kiln.cuda_core.disable()
    assert core.Program is original and not kiln.cuda_core.enabled()
    assert program_module.Program is original
    kiln.cuda_core.disable()
    assert core.Program is original
    # A program made while enabled compiles with cuda.core once disabled.
    assert made_while_enabled.compile("cubin").code.startswith(b"stand-in: compiled by cuda.core")
    assert kiln.cuda_core.stats()["routed"] == {} and kiln.cuda_core.stats()["fallbacks"] == {}
    kiln.cuda_core.enable()
    assert core.Program is routed_class  # the same subclass again


def test_unsupported_version_is_refused(core, monkeypatch):
    original = core.Program
    for version in ("1.1.0", "1.3.0", "0.7.2", "2.0.0", "weird"):
        monkeypatch.setattr(core, "__version__", version)
        with pytest.raises(kiln.Error, match=f"supports cuda.core 1.2.x; this is cuda.core {version}"):
            kiln.cuda_core.enable()
        assert core.Program is original and not kiln.cuda_core.enabled()
    monkeypatch.setattr(core, "__version__", "1.2.1")
    if kiln.api_version() >= _native.COMPILE_API_VERSION:
        kiln.cuda_core.enable()
        assert kiln.cuda_core.enabled() and core.Program is not original


def test_changed_internals_are_refused(core, monkeypatch):
    original = core.Program

    class NoCache(original):
        def compile(self, target_type, name_expressions=(), logs=None):
            return None

    monkeypatch.setattr(core, "Program", NoCache)
    with pytest.raises(kiln.Error, match="Program.compile of cuda.core 1.2.0 is not the one"):
        kiln.cuda_core.enable()
    assert core.Program is NoCache
    monkeypatch.undo()
    monkeypatch.delattr(core.ObjectCode, "from_ltoir")
    with pytest.raises(kiln.Error, match="no ObjectCode.from_ltoir"):
        kiln.cuda_core.enable()
    monkeypatch.undo()
    monkeypatch.delattr(sys.modules["cuda.core._utils.cuda_utils"], "NVRTCError")
    with pytest.raises(kiln.Error, match="no NVRTCError"):
        kiln.cuda_core.enable()
    assert core.Program is original and not kiln.cuda_core.enabled()


def test_old_library_is_refused(core, monkeypatch):
    library, path, _version = _native.load()
    monkeypatch.setattr(_native, "_loaded", (library, path, 1))
    with pytest.raises(kiln.LibraryError, match="kiln_compile"):
        kiln.cuda_core.enable()
    assert core.Program is sys.modules["cuda.core._program"].Program


def _child(code, **env):
    env.setdefault("PYTHONPATH", os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]))
    return subprocess.run([sys.executable, "-c", code], env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=120)


def test_env_switch_enables_when_cuda_core_is_imported(compile_api):
    code = ("import sys, kiln, kiln.cuda_core\n"
            "assert 'cuda.core' not in sys.modules\n"
            "import cuda.core\n"
            "assert cuda.core.Program.__module__ == 'kiln.cuda_core._program'\n"
            "assert type(cuda.core.__spec__.loader).__name__ != '_Loader'\n"
            "assert not any(type(f).__name__ == 'ImportFinder' for f in sys.meta_path)\n"
            "print('enabled', kiln.cuda_core.enabled())\n")
    result = _child(code, KILN_CUDA_CORE="1")
    assert result.returncode == 0 and result.stdout.strip() == "enabled True", result.stderr
    # cuda.core imported first, kiln second: enabled at `import kiln`.
    code = "import cuda.core, kiln, kiln.cuda_core; print('enabled', kiln.cuda_core.enabled())"
    result = _child(code, KILN_CUDA_CORE="1")
    assert result.returncode == 0 and result.stdout.strip() == "enabled True", result.stderr
    result = _child(code, KILN_CUDA_CORE="0")
    assert result.stdout.strip() == "enabled False", result.stderr
    result = _child(code, KILN_CUDA_CORE="yes")
    assert result.stdout.strip() == "enabled False" and "KILN_CUDA_CORE='yes' ignored" in result.stderr


def test_env_switch_warns_for_unsupported_cuda_core(compile_api):
    code = "import kiln, kiln.cuda_core, cuda.core; print('enabled', kiln.cuda_core.enabled(), cuda.core.__version__)"
    result = _child(code, KILN_CUDA_CORE="1", CUDA_CORE_STAND_IN_VERSION="1.1.0")
    assert result.returncode == 0, result.stderr  # the program runs on, with cuda.core's own compiler
    assert result.stdout.strip() == "enabled False 1.1.0"
    assert "KILN_CUDA_CORE=1: cuda.core keeps its own compiler" in result.stderr
    assert "supports cuda.core 1.2.x" in result.stderr


def test_runner_runs_a_program_with_kiln(compile_api, tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import sys, kiln.cuda_core\n"
                       "from cuda.core import Program, ProgramOptions\n"
                       f"o = Program({PLAIN!r}, 'c++', ProgramOptions(arch='sm_90')).compile('cubin')\n"
                       "print('argv', sys.argv[1:], o.code[:4], kiln.cuda_core.stats()['routed'])\n"
                       "sys.exit(3)\n")
    env = subprocess_env(PYTHONPATH=os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]),
                         KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_CUDA_CORE=None)
    result = subprocess.run([sys.executable, "-m", "kiln.cuda_core", str(program), "a", "--b"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == "argv ['a', '--b'] b'\\x7fELF' {'compiled': 1}"
    usage = subprocess.run([sys.executable, "-m", "kiln.cuda_core"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert usage.returncode == 2 and "usage" in usage.stderr
    refused = subprocess.run([sys.executable, "-m", "kiln.cuda_core", str(program)], capture_output=True,
                             text=True, timeout=120, env=dict(env, CUDA_CORE_STAND_IN_VERSION="9.0.0"))
    assert refused.returncode == 2 and refused.stderr.startswith("kiln.cuda_core supports cuda.core 1.2.x")


def test_relocatable_device_code_is_served_as_a_relocatable_cubin(routed):
    # numba-cuda compiles the .cu files it links with relocatable_device_code=True.
    core, _engine = routed
    if kiln.api_version() < 5:
        pytest.skip("libkiln without --relocatable-device-code")
    source = 'extern "C" __device__ int twice(int x) { return 2 * x; }\n'
    result = core.Program(source, "c++", options(core, relocatable_device_code=True)).compile("cubin")
    assert calls(core) == [] and kiln.cuda_core.stats()["routed"] == {"compiled": 1}
    assert result.code[:4] == b"\x7fELF" and int.from_bytes(result.code[16:18], "little") == 1  # ET_REL
