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
