"""kiln.Engine's blobs with labels (libkiln API 7: kiln_blob_put_labeled) and engines without a GPU runtime
(KILN_ENGINE_NO_RUNTIME), through the Python package: labels read back through the C API, what bad labels
get, blob_find's origin, and an engine that loads no driver still keeping blobs and compiling for a named
target."""

import ctypes

import pytest

import kiln
from kiln import _native


@pytest.fixture(autouse=True)
def label_api():
    version = kiln.api_version()
    if version < _native.LABEL_API_VERSION:
        pytest.skip(f"{kiln.library_path} has kiln API version {version}: labels need 7")


def _labels(engine, namespace, key):
    library = _native.lib()
    handle = _native.H()
    raw = key.encode()
    _native.check(library.kiln_blob_get(engine._handle, namespace.encode(), raw, len(raw), ctypes.byref(handle)))
    assert handle.value
    try:
        count = ctypes.c_size_t()
        _native.check(library.kiln_blob_get_label(handle, 0, ctypes.byref(count), None, None))
        found = {}
        for index in range(count.value):
            name, value = ctypes.c_char_p(), ctypes.c_char_p()
            _native.check(library.kiln_blob_get_label(handle, index, None, ctypes.byref(name), ctypes.byref(value)))
            found[name.value.decode()] = value.value.decode()
        return found
    finally:
        library.kiln_blob_destroy(handle)


def test_labels_are_stored_and_read_back(engine):
    labels = {"kernel": "triton_poi_fused_0", "target": "sm_90", "file": "__grp__k.json"}
    assert engine.blob_put("triton", "KEY/group/k.json", b"bytes", labels=labels)
    assert _labels(engine, "triton", "KEY/group/k.json") == labels
    assert engine.blob_find("triton", "KEY/group/k.json") == (b"bytes", "disk")
    assert engine.blob_find("triton", "absent") is None
    assert engine.blob_put("triton", "KEY/file/x.so", b"so")  # no labels: kiln_blob_put
    assert _labels(engine, "triton", "KEY/file/x.so") == {}


def test_bad_labels_are_refused(engine):
    with pytest.raises(kiln.InvalidArgumentError, match="given twice|holds a character"):
        engine.blob_put("triton", "k", b"v", labels={"bad name": "v"})
    with pytest.raises(TypeError, match="labels must be a dict"):
        engine.blob_put("triton", "k", b"v", labels=[("a", "b")])
    with pytest.raises(ValueError, match="NUL"):
        engine.blob_put("triton", "k", b"v", labels={"a": "x\0y"})
    assert engine.blob_count("triton") == 0


def test_an_engine_without_a_runtime(cache_dir, nvrtc):
    with kiln.Engine(cache_dir=cache_dir, runtime=False) as engine:
        assert engine.vendor is None and engine.devices() == []
        assert engine.blob_put("ns", "k", b"v") and engine.blob_get("ns", "k") == b"v"
        binary = engine.compile('extern "C" __global__ void k(int* p) { *p = 1; }', target="sm_90")
        assert binary.kind == "cubin" and binary.data.startswith(b"\x7fELF")
