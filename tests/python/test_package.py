"""The kiln package over libkiln: errors, engine, sources, prewarm and compile-only binaries."""

import ctypes
import re

import pytest

import kiln
from kiln import _native
from conftest import KERNELS


def test_error_types_one_per_status():
    library = _native.lib()
    expected = {1: kiln.InvalidArgumentError, 2: kiln.InvalidHandleError, 3: kiln.CompileError, 4: kiln.LoadError,
                5: kiln.LaunchError, 6: kiln.ConfigError, 7: kiln.DeviceUnavailableError, 8: kiln.OutOfMemoryError,
                9: kiln.InternalError}
    for code, cls in expected.items():
        assert issubclass(cls, kiln.Error)
        assert cls.code == code
        assert cls.status == library.kiln_status_name(code).decode()  # the C API's name for the same status
        assert kiln.errors.error_type(code) is cls
    assert kiln.errors.error_type(1234) is kiln.Error
    assert issubclass(kiln.LibraryError, kiln.Error) and issubclass(kiln.LibraryError, OSError)
    assert kiln.KilnError is kiln.Error


def test_check_raises_the_status_class_with_kiln_message():
    with pytest.raises(kiln.ConfigError) as caught:
        kiln.Source.builtin("no_such_builtin_kernel")
    error = caught.value
    assert error.status == "KILN_ERROR_CONFIG" and error.code == 6
    assert "no_such_builtin_kernel" in error.message
    assert str(error).startswith("KILN_ERROR_CONFIG: ")
    assert error.log == ""


def test_library_and_version():
    assert kiln.api_version() >= 1
    assert re.search(r"libkiln\.so", kiln.library_path)


def test_engine_without_device(engine):
    assert isinstance(engine.devices(), list)
    stats = engine.stats()
    assert set(stats) == set(_native.STAT_NAMES)
    assert all(isinstance(value, int) for value in stats.values())
    with pytest.raises(ValueError):
        kiln.Engine(vendor="metal")


def test_source_errors():
    with pytest.raises(kiln.ConfigError):
        kiln.Source.from_text("")
    with pytest.raises(TypeError):
        kiln.Engine(cache_disable=True).prewarm(42, "sm_90")
    assert "saxpy.cu" in kiln.Source.builtin_names()


def test_bare_python_numbers_are_refused_as_arguments():
    with pytest.raises(TypeError, match="no C width"):
        kiln._api._argument(3)
    assert isinstance(kiln._api._argument(kiln.u32(3)), ctypes.c_uint32)


def test_prewarm_and_compile_error(engine, nvrtc):
    source = kiln.Source.from_text(KERNELS, name="py_kernels.cu")
    first = engine.prewarm(source, "sm_90", names=["py_scale<float>"])
    assert first["origin"] == "compiled" and first["stored"] and first["binary_bytes"] > 0
    assert re.fullmatch(r"[0-9a-f]{32}", first["key"])
    again = engine.prewarm(source, "sm_90", names=["py_scale<float>"])
    assert again["origin"] == "disk" and again["key"] == first["key"]

    broken = kiln.Source.from_text("#include <kiln/rtc.h>\nKILN_KERNEL void k() { undeclared_thing; }\n", name="bad.cu")
    with pytest.raises(kiln.CompileError) as caught:
        engine.prewarm(broken, "sm_90")
    assert "undeclared_thing" in caught.value.log
    assert "undeclared_thing" in str(caught.value)
    assert "log text" in str(kiln.CompileError("short message", log="log text"))


def test_compile_needs_api_version_2(engine, monkeypatch):
    library, path, _version = _native.load()
    monkeypatch.setattr(_native, "_loaded", (library, path, 1))
    with pytest.raises(kiln.LibraryError, match=r"kiln_compile.*API version 2.*has version 1"):
        engine.compile(KERNELS, target="sm_90")
    with pytest.raises(kiln.Error):
        kiln.compile(KERNELS, target="sm_90")


def test_compile_cubin(engine, compile_api):
    source = kiln.Source.from_text(KERNELS, name="py_kernels.cu")
    names = ["py_scale<float>", "py_scale<double>"]
    binary = engine.compile(source, names=names, target="sm_90")
    assert isinstance(binary, kiln.Binary)
    assert binary.kind == "cubin" and binary.target == "sm_90"
    assert binary.data[:4] == b"\x7fELF" and isinstance(binary.data, bytes)
    assert re.fullmatch(r"[0-9a-f]{32}", binary.key)
    assert binary.origin == "compiled"
    assert set(binary.lowered_names) == set(names)
    for expression, lowered in binary.lowered_names.items():
        assert lowered.startswith("_Z") and "py_scale" in lowered, (expression, lowered)
        assert lowered.encode() in binary.data  # the symbol is in the ELF's string table
    assert isinstance(binary.log, str) and binary.seconds >= 0

    again = engine.compile(source, names=names, target="sm_90")
    assert again.origin == "memory" and again.data == binary.data and again.key == binary.key
    assert again.log == ""
    # Same key as prewarm gives for the same request: one cache, two ways in.
    assert engine.prewarm(source, "sm_90", names=names)["key"] == binary.key


def test_compile_of_text_is_the_request_of_a_source_named_source_cu(engine, compile_api):
    # Text is compiled without a kiln.Source object (one C source for the call), as Source.from_text(text)
    # would be: the same key, served from the engine's memory the second time, and the same refusals.
    names = ["py_scale<float>"]
    from_text = engine.compile(KERNELS, names=names, target="sm_90")
    from_source = engine.compile(kiln.Source.from_text(KERNELS), names=names, target="sm_90")
    assert from_source.key == from_text.key and from_source.origin == "memory"
    assert from_source.lowered_names == from_text.lowered_names
    named = engine.compile(kiln.Source.from_text(KERNELS, name="other.cu"), names=names, target="sm_90")
    assert named.origin == "compiled" and named.key != from_text.key  # the file name is part of the request
    with pytest.raises(kiln.ConfigError, match="empty kernel name"):
        engine.compile(KERNELS, names="", target="sm_90")
    with pytest.raises(TypeError):
        engine.compile(KERNELS.encode(), target="sm_90")


def test_compile_from_disk_in_a_new_engine(cache_dir, compile_api):
    with kiln.Engine(cache_dir=cache_dir) as first:
        compiled = first.compile(KERNELS, target="sm_90")
    with kiln.Engine(cache_dir=cache_dir) as second:
        found = second.compile(KERNELS, target="sm_90")
        assert second.stats()["disk_hits"] == 1 and second.stats()["compiles"] == 0
    assert compiled.origin == "compiled" and found.origin == "disk"
    assert found.data == compiled.data and found.lowered_names == {}


def test_compile_with_an_include_folder(cache_dir, compile_api, tmp_path):
    """-I through the Python package: a new engine is served by stat; an edited header is another key."""
    header = tmp_path / "inc" / "lib" / "value.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define VALUE 1\n")
    source = '#include <lib/value.h>\nextern "C" __global__ void k(int* o) { *o = VALUE; }\n'
    options = ["-I" + str(tmp_path / "inc")]
    with kiln.Engine(cache_dir=cache_dir) as first:
        compiled = first.compile(source, options=options, target="sm_90")
        assert first.stats()["include_resolves"] == 1 and first.stats()["manifest_hits"] == 0
    with kiln.Engine(cache_dir=cache_dir) as second:
        found = second.compile(source, options=options, target="sm_90")
        assert second.stats()["compiles"] == 0
        assert second.stats()["manifest_hits"] == 1 and second.stats()["include_resolves"] == 0
    assert compiled.origin == "compiled" and found.origin == "disk" and found.key == compiled.key
    header.write_text("#define VALUE 2\n")
    with kiln.Engine(cache_dir=cache_dir) as third:
        edited = third.compile(source, options=options, target="sm_90")
    assert edited.origin == "compiled" and edited.key != compiled.key
    with pytest.raises(kiln.ConfigError, match="does not exist"):
        kiln.Engine(cache_dir=cache_dir).compile(source, options=["-I" + str(tmp_path / "nowhere")], target="sm_90")


def test_compile_ptx_and_options(engine, compile_api):
    binary = engine.compile(KERNELS, options=["--fast-math", "-DEXTRA=1"], target="compute_90")
    assert binary.kind == "ptx" and binary.target == "compute_90"
    assert b".target sm_90" in binary.data and b"py_fill" in binary.data
    with pytest.raises(kiln.ConfigError, match="unknown option"):
        engine.compile(KERNELS, options=["--no-such-flag"], target="sm_90")
    with pytest.raises(kiln.ConfigError):
        engine.compile(KERNELS, target="sm_1")


def test_compile_ltoir_and_relocatable_code(cache_dir, compile_api):
    """An lto_XX target gives LTO-IR (kind "ltoir", its signature, lowered names); a second engine reads it
    from disk byte for byte; --relocatable-device-code gives an ET_REL CUBIN under another key."""
    if kiln.api_version() < 5:
        pytest.skip(f"{kiln.library_path} has kiln API version {kiln.api_version()}: LTO-IR needs 5")
    names = ["py_scale<float>"]
    with kiln.Engine(cache_dir=cache_dir) as first:
        lto = first.compile(KERNELS, names=names, target="lto_90")
        cubin = first.compile(KERNELS, names=names, target="sm_90")
        rdc = first.compile(KERNELS, options=["--relocatable-device-code"], names=names, target="sm_90")
    assert lto.kind == "ltoir" and lto.target == "lto_90" and lto.origin == "compiled"
    assert lto.data[:4] == b"\xed\x43\x4e\x7f" and len(lto.data) > 32
    assert lto.lowered_names == cubin.lowered_names and lto.lowered_names["py_scale<float>"].startswith("_Z")
    assert lto.key != cubin.key
    assert cubin.data[16] == 2 and rdc.kind == "cubin" and rdc.data[16] == 1  # ELF e_type: ET_EXEC, ET_REL
    assert rdc.key != cubin.key
    with kiln.Engine(cache_dir=cache_dir) as second:
        found = second.compile(KERNELS, names=names, target="lto_90")
        assert second.stats()["compiles"] == 0
    assert found.origin == "disk" and found.kind == "ltoir" and found.data == lto.data
    with pytest.raises(kiln.ConfigError, match="-fgpu-rdc"):
        kiln.Engine(cache_dir=cache_dir).compile(KERNELS, options=["--relocatable-device-code"], target="gfx90a")
    with pytest.raises(kiln.ConfigError, match="lto_XY"):
        kiln.Engine(cache_dir=cache_dir).compile(KERNELS, options=["-Xcuda=-dlto"], target="sm_90")


def test_compile_options_are_read_at_each_call(engine, compile_api):
    # Option sets are encoded once and kept (_option_strings): a list the caller changes between two
    # calls must still give the request it holds at each call, and bad items are still refused.
    options = ["-DEXTRA=1"]
    first = engine.compile(KERNELS, options=options, target="sm_90")
    options[0] = "-DEXTRA=2"
    second = engine.compile(KERNELS, options=options, target="sm_90")
    again = engine.compile(KERNELS, options=("-DEXTRA=1",), target="sm_90")
    assert first.key != second.key and again.key == first.key
    assert engine.compile(KERNELS, options="-DEXTRA=2", target="sm_90").key == second.key  # one lone option
    with pytest.raises(TypeError, match="options"):
        engine.compile(KERNELS, options=[1], target="sm_90")
    with pytest.raises(TypeError, match="options"):
        engine.compile(KERNELS, options=[["-DEXTRA=1"]], target="sm_90")


def test_compile_error_carries_log(engine, compile_api):
    with pytest.raises(kiln.CompileError) as caught:
        engine.compile("#include <kiln/rtc.h>\nKILN_KERNEL void k() { not_declared_here; }\n", target="sm_90")
    assert "not_declared_here" in caught.value.log


def test_module_level_functions(compile_api, monkeypatch, cache_dir):
    monkeypatch.setenv("KILN_CACHE_DIR", cache_dir)
    monkeypatch.setattr(kiln._api, "_default", None)
    binary = kiln.compile(KERNELS, names="py_scale<int>", target="sm_90")  # a lone string is one name
    assert list(binary.lowered_names) == ["py_scale<int>"]
    assert kiln.prewarm(KERNELS, "sm_90", names=["py_scale<int>"])["key"] == binary.key
    assert kiln.stats()["compiles"] == 1
    assert kiln.default_engine() is kiln.default_engine()


TINY = 'extern "C" __global__ void tiny(int* out) { *out = 1; }\n'


def test_default_engine_records_its_counters_at_exit(compile_api, cache_dir):
    # The default engine is not destroyed at interpreter exit, so its counters reached `kiln cache stats`'s
    # lifetime counters only for engines closed by hand (kiln.cupy's processes showed 0 compiles there). Now an
    # atexit hook records them; a process that closes it by hand too counts once.
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
    # In a large program (a CuPy one) the module state close() needs is gone by the time the engine is collected,
    # and close() then destroys nothing: the child makes that so at exit (an atexit hook registered after kiln's
    # runs before it), as a small script's teardown does not.
    script = ("import atexit, kiln; s = kiln.Source.from_text({!r}); kiln.compile(s, target='sm_90'); "
              "kiln.compile(s, target='sm_90'){}; atexit.register(setattr, kiln._native, '_loaded', None)")
    for tail in ("", "; kiln.default_engine().close()"):  # a compile and a memory hit; then a disk and a memory hit
        subprocess.run([sys.executable, "-c", script.format(TINY, tail)], env=env, check=True, timeout=120)
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(kiln.library_path))), "tools", "kiln")
    shown = subprocess.run([cli, "cache", "stats", "--json"], env=env, capture_output=True, text=True, check=True)
    lifetime = json.loads(shown.stdout)["lifetime"]
    counted = {name: lifetime[name] for name in ("compiles", "misses", "disk_hits", "memory_hits")}
    assert counted == {"compiles": 1, "misses": 1, "disk_hits": 1, "memory_hits": 2}, lifetime


def test_engine_refuses_an_empty_cache_dir(monkeypatch, cache_dir):
    # The CLI and KILN_CACHE_DIR refuse an empty folder; the package used to hand NULL (the default cache) over.
    for empty in ("", b""):
        with pytest.raises(ValueError, match="cache_dir is empty: refused"):
            kiln.Engine(cache_dir=empty)
    with pytest.raises(TypeError, match="cache_dir must be a folder path"):
        kiln.Engine(cache_dir=123)
    # None still means "from the environment": an empty KILN_CACHE_DIR is kiln's own refusal.
    monkeypatch.setenv("KILN_CACHE_DIR", "")
    with pytest.raises(kiln.ConfigError, match="KILN_CACHE_DIR"):
        kiln.Engine(cache_dir=None)
    monkeypatch.setenv("KILN_CACHE_DIR", cache_dir)
    kiln.Engine(cache_dir=None).close()


def test_nul_bytes_are_refused_naming_the_argument(engine):
    # kiln reads C strings: a NUL byte would cut the string there (the text after it silently lost).
    program = kiln.Program(None, engine)  # no handle (a program needs a GPU): the name is refused before any call
    cases = [
        ("text", lambda: kiln.Source.from_text(KERNELS + "\0 lost")),
        ("name", lambda: kiln.Source.from_text(KERNELS, name="a.cu\0.txt")),
        (r"headers: the include name 'a.h\x00'", lambda: kiln.Source.from_text(KERNELS, headers={"a.h\0": "x"})),
        ("headers['a.h']", lambda: kiln.Source.from_text(KERNELS, headers={"a.h": "#define A 1\0"})),
        ("name", lambda: kiln.Source.builtin("saxpy\0")),
        ("source", lambda: engine.compile(KERNELS + "\0 lost", target="sm_90")),
        ("options[1]", lambda: engine.compile(KERNELS, options=["-DA=1", "-DB=2\0"], target="sm_90")),
        ("options[0]", lambda: engine.prewarm(KERNELS, "sm_90", options="-DB=2\0")),
        ("names[0]", lambda: engine.compile(KERNELS, names=["py_scale<float>\0"], target="sm_90")),
        ("names[0]", lambda: engine.prewarm(KERNELS, "sm_90", names="py_scale<float>\0")),
        ("target", lambda: engine.compile(KERNELS, target="sm_90\0junk")),
        ("target", lambda: engine.prewarm(KERNELS, "sm_90\0junk")),
        ("name", lambda: engine.kernel(KERNELS, "py_fill\0")),
        ("name", lambda: program.kernel("py_fill\0")),
        ("cache_dir", lambda: kiln.Engine(cache_dir="/tmp/kiln\0cache")),
    ]
    for what, call in cases:
        with pytest.raises(ValueError, match="^" + re.escape(f"{what} holds a NUL byte")):
            call()


def test_wrong_types_are_type_errors_naming_the_argument(engine):
    program = kiln.Program(None, engine)  # no handle: the argument is refused before any call
    cases = [
        ("target must be a str, got int", lambda: engine.compile(KERNELS, target=123)),
        ("target must be a str, got int", lambda: engine.prewarm(KERNELS, 90)),
        ("target must be a str, got bytes", lambda: engine.compile(KERNELS, target=b"sm_90")),
        ("name must be a str, got NoneType", lambda: kiln.Source.from_text(KERNELS, name=None)),
        ("name must be a str, got NoneType", lambda: kiln.Source.builtin(None)),
        ("name must be a str, got NoneType", lambda: engine.kernel(KERNELS, None)),
        ("name must be a str, got NoneType", lambda: program.kernel(None)),
        ("text must be a str, got bytes", lambda: kiln.Source.from_text(KERNELS.encode())),
        ("headers must be a dict of str", lambda: kiln.Source.from_text(KERNELS, headers=["a.h"])),
        ("headers['a.h'] must be a str, got int", lambda: kiln.Source.from_text(KERNELS, headers={"a.h": 1})),
        ("headers: an include name must be a str, got int", lambda: kiln.Source.from_text(KERNELS, headers={1: ""})),
        ("options must be a str or a sequence of str, got int", lambda: engine.compile(KERNELS, options=5)),
        ("options must be a str or a sequence of str, got bytes", lambda: engine.prewarm(KERNELS, "sm_90", b"-DA")),
        ("options[0] must be a str, got bytes", lambda: engine.compile(KERNELS, options=[b"-DA=1"])),
        ("options[0] must be a str, got int", lambda: engine.kernel(KERNELS, "py_fill", options=[1])),
        ("names[1] must be a str, got NoneType", lambda: engine.compile(KERNELS, names=["py_fill", None])),
        ("source must be a kiln.Source or the source text", lambda: engine.prewarm(KERNELS.encode(), "sm_90")),
        ("vendor must be None or a str", lambda: kiln.Engine(vendor=1)),
        ("device must be an int", lambda: kiln.Engine(device="0")),
    ]
    for expected, call in cases:
        with pytest.raises(TypeError, match="^" + re.escape(expected)):
            call()


def test_empty_target_is_refused_and_none_means_native(engine):
    # The C API reads a NULL target as "native"; an empty string used to become NULL here without a word.
    with pytest.raises(ValueError, match="target is empty"):
        engine.compile(KERNELS, target="")
    with pytest.raises(ValueError, match="target is empty"):
        engine.prewarm(KERNELS, "")

    def outcome(call):  # what a call gives: the binary's key, or the error kiln raised
        try:
            result = call()
        except kiln.Error as error:
            return type(error), error.message
        return result.key if isinstance(result, kiln.Binary) else result["key"]

    # None is documented as "native" (the engine's device: an error without a GPU, a binary with one).
    assert outcome(lambda: engine.compile(KERNELS, target=None)) == outcome(lambda: engine.compile(KERNELS))
    assert outcome(lambda: engine.prewarm(KERNELS, None)) == outcome(lambda: engine.prewarm(KERNELS, "native"))


def test_source_name_must_not_be_empty(engine):
    # The name is the compiler's file name and part of the key: libkiln used to rename "" to "<source>".
    with pytest.raises(ValueError, match="name is empty"):
        kiln.Source.from_text(KERNELS, name="")
    with pytest.raises(ValueError, match="name is empty"):
        engine._compile_text(_native.lib(), "", KERNELS, (), (), "sm_90")


def test_from_text_in_cxx_order_is_refused_not_compiled():
    # C++ writes Source::from_text(name, text); Python from_text(text, name=...). Swapped, the source text was
    # the name and "my.cu" the text, compiled as such without a word.
    with pytest.raises(ValueError, match="In Python the text comes first"):
        kiln.Source.from_text("my.cu", KERNELS)
    with pytest.raises(ValueError, match="line break"):
        kiln.Source.from_text(KERNELS, name="two\nlines.cu")
    kiln.Source.from_text(KERNELS, name="my.cu", headers={"my.h": "#define X 1\n"}).close()


def test_engine_device_beyond_the_devices_is_a_config_error():
    # With no device (this machine) as with too few: a device ordinal > 0 names a device that is not there.
    with pytest.raises(kiln.ConfigError, match="device 99 requested"):
        kiln.Engine(device=99)


def test_compile_error_says_each_log_line_once(engine, compile_api):
    with pytest.raises(kiln.CompileError) as caught:
        engine.compile('extern "C" __global__ void k(int* o) { *o = ; }\n', target="sm_90")
    error = caught.value
    first = error.log.strip().splitlines()[0]
    assert "error" in first and "source.cu" in first
    assert str(error).count(first) == 1 and error.message.count(first) == 1
    assert error.log.strip() in str(error)  # the whole log, once, in the text too
    assert re.search(r"errors? detected", error.log)  # the log is whole: NVRTC's closing line
    assert str(error).startswith("KILN_ERROR_COMPILE: ") and str(error) == f"{error.status}: {error.message}"
    # A message that quotes the first line of a log it does not show: the log follows, the line once.
    quoted = kiln.CompileError("compile failed: a.cu(1): error: bad", log="a.cu(1): error: bad\n  ^\n1 error\n")
    assert str(quoted).count("a.cu(1): error: bad") == 1 and "1 error" in str(quoted)


def test_cuda_engine_without_a_driver_compiles(cache_dir, compile_api):
    # An explicit CUDA vendor on a machine with the toolkit but no driver is a compile-only engine.
    with kiln.Engine(vendor="cuda", cache_dir=cache_dir) as engine:
        binary = engine.compile(TINY, target="sm_90")
    assert binary.kind == "cubin" and binary.data[:4] == b"\x7fELF" and binary.origin == "compiled"


def test_kiln_vendor_cuda_without_a_driver_compiles(cache_dir, compile_api, monkeypatch):
    # The same vendor from the environment (read when the engine is created).
    monkeypatch.setenv("KILN_VENDOR", "cuda")
    with kiln.Engine(cache_dir=cache_dir) as engine:
        binary = engine.compile(TINY, target="sm_90")
        assert engine.vendor in (None, "cuda")  # None: no driver, so no device
    assert binary.kind == "cubin" and binary.data[:4] == b"\x7fELF" and binary.origin == "compiled"


def test_stat_names_follow_the_one_counter_list():
    # The C++ side derives its counters from KILN_CACHE_COUNTERS (cache/include/kiln/cache/stats.hpp);
    # kiln_stats (kiln.h) and this binding's STAT_NAMES are written out by hand: all three agree.
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "cache", "include", "kiln", "cache", "stats.hpp")) as f:
        header = f.read()
    listed = header[header.index("#define KILN_CACHE_COUNTERS(X)"):header.index("// clang-format on")]
    counters = tuple(re.findall(r"X\((\w+)\)", listed))
    with open(os.path.join(repo, "engine", "include", "kiln", "kiln.h")) as f:
        capi = f.read()
    struct = capi[capi.index("typedef struct kiln_stats {"):capi.index("} kiln_stats;")]
    fields = tuple(re.findall(r"uint64_t (\w+);", struct))
    assert counters == fields == _native.STAT_NAMES


def test_blob_functions_mirror_kiln_h():
    # _native's prototypes of kiln.h's blob calls (API 6, labels API 7) are written out by hand: each takes as
    # many arguments as kiln.h declares, and the limits and the flag agree.
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "engine", "include", "kiln", "kiln.h")) as f:
        capi = f.read()
    declared = {name: len(params.split(","))
                for name, params in re.findall(r"KILN_API kiln_status (kiln_blob_\w+)\(([^)]*)\);", capi)}
    assert set(declared) == set(_native._VERSION_6) | set(_native._VERSION_7)
    assert declared == {name: len(_native._PROTOTYPES[name][1]) for name in declared}
    assert f"#define KILN_BLOB_MAX_NAMESPACE {_native.BLOB_MAX_NAMESPACE}u" in capi
    assert f"#define KILN_BLOB_MAX_KEY {_native.BLOB_MAX_KEY}u" in capi
    assert f"#define KILN_BLOB_MAX_LABELS {_native.BLOB_MAX_LABELS}u" in capi
    assert f"#define KILN_ENGINE_NO_RUNTIME 0x{_native.ENGINE_NO_RUNTIME:x}u" in capi
    assert [name for name, _ in _native.BlobLabel._fields_] == ["name", "value"]
    assert int(re.search(r"#define KILN_API_VERSION (\d+)", capi).group(1)) >= _native.BLOB_API_VERSION


def test_binary_kinds_have_one_name_everywhere(tmp_path):
    # The AMD kind was `amdgpu-code-object` (ls --json, the docs), `amdgpu` (ls), `amd_code_object` (C++, Python)
    # and KILN_BINARY_AMD_CODE_OBJECT (C): one name now, each interface's spelling of it.
    import json
    import os
    import subprocess
    from conftest import REPO

    def read(path):
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            return f.read()

    c_names = {int(n): name.lower()
               for name, n in re.findall(r"KILN_BINARY_(\w+) = (\d)", read("engine/include/kiln/kiln.h"))}
    enum = read("engine/include/kiln/engine.hpp")
    enum = enum[enum.index("enum class BinaryKind"):]
    cxx_names = {int(n): name for name, n in re.findall(r"^\s+(\w+) = (\d),", enum[:enum.index("};")], re.MULTILINE)}
    types = read("cache/include/kiln/cache/types.hpp")
    numbers = dict(re.findall(r"(\w+) = (\d)", types[types.index("enum class PayloadKind"):]))
    strings = {int(numbers[name]): text
               for name, text in re.findall(r"case PayloadKind::(\w+): return \"([\w-]+)\"", types)}
    for number, name in _native.BINARY_KINDS.items():
        assert c_names[number] == cxx_names[number] == strings[number] == name, (number, name)

    # And as the CLI shows a gfx entry, beside what Python's Binary says of it.
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(kiln.library_path))), "tools", "kiln")
    cache = str(tmp_path / "cache")
    with kiln.Engine(cache_dir=cache) as engine:
        try:
            binary = engine.compile(kiln.Source.builtin("saxpy"), target="gfx90a")
        except kiln.DeviceUnavailableError as error:
            pytest.skip(f"no HIPRTC: {error}")
    assert binary.kind == "amd_code_object"
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    listed = subprocess.run([cli, "cache", "ls", "--json"], env=env, capture_output=True, text=True, check=True)
    assert [entry["payload_kind"] for entry in json.loads(listed.stdout)] == [binary.kind]
    table = subprocess.run([cli, "cache", "ls"], env=env, capture_output=True, text=True, check=True).stdout
    assert re.search(r"\bhip\s+amd_code_object\s+gfx90a\b", table), table
