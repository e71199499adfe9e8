"""kiln.cuda_core.ProgramCache: cuda.core's ProgramCacheResource over kiln's disk cache (libkiln API 6),
without cuda.core and against the stand-in (tests/python/stand_in/cuda/core): round trips in a second
process, the symbol_mapping kept, damaged and foreign values as misses, the mapping's operations, the
counters, the size cap, cuda.core's own compile(cache=...) path, and kiln's routing serving a compile
given a ProgramCache (name expressions included) from the cache's folder."""

import json
import os
import subprocess
import sys
import types

import pytest

import kiln
import kiln.cuda_core
from kiln import _native, _record
from kiln.cuda_core import _program_cache
from conftest import REPO, STAND_IN, subprocess_env
from test_cuda_core import calls, options

KERNEL = """
template <typename T> __global__ void pc_scale(T* data, T factor, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
extern "C" __global__ void pc_plain(int* out) { *out = 7; }
"""


@pytest.fixture(autouse=True)
def blob_api():
    version = kiln.api_version()
    if version < _native.BLOB_API_VERSION:
        pytest.skip(f"{kiln.library_path} has kiln API version {version}: ProgramCache needs 6")


@pytest.fixture
def cache(cache_dir):
    with kiln.cuda_core.ProgramCache(cache_dir) as value:
        yield value


def _child(code, **env):
    env.setdefault("PYTHONPATH", os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]))
    env.setdefault("KILN_CUDA_CORE", None)
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(**env), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _entry_files(cache_dir):
    return [os.path.join(folder, name) for folder, _dirs, names in os.walk(os.path.join(cache_dir, "v1"))
            for name in names if name.endswith(".kiln")]


# --- without cuda.core ---------------------------------------------------------------------------


def test_works_without_cuda_core(cache):
    assert "cuda.core" not in sys.modules  # the class is made without cuda.core's base class
    assert type(cache).__mro__[1:] == (_program_cache.ProgramCacheMethods, object)
    cache[b"key"] = b"\x7fELF bytes"
    assert cache[b"key"] == b"\x7fELF bytes" and cache.get(b"key") == b"\x7fELF bytes"
    assert cache["key"] == b"\x7fELF bytes"  # a str key is its UTF-8 bytes, as cuda.core has it
    assert cache.get(b"absent") is None and cache.get(b"absent", b"default") == b"default"
    with pytest.raises(kiln.Error, match="needs cuda.core"):
        cache.get_object_code(b"key", code_type="cubin")


def test_round_trip_in_a_second_process(cache, cache_dir):
    cache[b"\x00key\xff"] = bytes(range(256)) * 8
    code = ("import kiln.cuda_core, sys\n"
            f"cache = kiln.cuda_core.ProgramCache({cache_dir!r})\n"
            "value = cache.get(b'\\x00key\\xff')\n"
            "print(value == bytes(range(256)) * 8, len(cache), cache.stats()['get_hits'])\n")
    assert _child(code, PYTHONPATH=os.path.join(REPO, "python")) == "True 1 1"


def test_mapping_operations(cache):
    cache.update({b"a": b"1", "b": bytearray(b"2")})
    cache.update([(b"c", memoryview(b"3"))])
    assert len(cache) == 3
    assert b"a" in cache and "c" in cache and b"z" not in cache
    del cache[b"a"]
    assert b"a" not in cache and len(cache) == 2
    with pytest.raises(KeyError):
        del cache[b"a"]
    with pytest.raises(KeyError):
        cache[b"a"]
    cache[b"b"] = b"22"  # replaces
    assert cache[b"b"] == b"22" and len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.get(b"b") is None
    for bad in (1, None, 2.5):
        with pytest.raises(TypeError, match="keys must be bytes or str"):
            cache.get(bad)
    with pytest.raises(TypeError, match="bytes-like or an ObjectCode"):
        cache[b"k"] = 12
    cache[b"empty"] = b""
    assert cache[b"empty"] == b""


def test_namespaces_share_a_folder_without_meeting(cache_dir):
    with kiln.cuda_core.ProgramCache(cache_dir) as one, \
            kiln.cuda_core.ProgramCache(cache_dir, namespace="other") as two:
        one[b"k"] = b"one"
        two[b"k"] = b"two"
        assert one[b"k"] == b"one" and two[b"k"] == b"two"
        one.clear()
        assert len(one) == 0 and two[b"k"] == b"two" and len(two) == 1


def test_stats_count_what_happened(cache):
    cache[b"k"] = b"v"
    cache.get(b"k")
    cache.get(b"k")
    cache.get(b"absent")
    assert b"k" in cache  # a check is not a use: not counted
    stats = cache.stats()
    assert stats["get_hits"] == 2 and stats["get_misses"] == 1 and stats["stores"] == 1
    assert stats["hits"] == 2 and stats["misses"] == 1 and stats["not_stored"] == 0
    assert stats["undecodable"] == 0 and stats["corrupt_removed"] == 0 and stats["bytes_written"] > 0


def test_foreign_and_cut_values_are_misses_and_removed(cache, cache_dir):
    good = _program_cache.encode(b"code", "cubin", "n", {"k": b"v"})
    header = b'{"code_type":"elf","name":"","code_size":1,"symbol_mapping":[]}'
    unknown_type = _record.PREFIX.pack(_program_cache.MAGIC, 1, len(header)) + header + b"c"
    raw = kiln.Engine(cache_dir=cache_dir)
    for key, value in ((b"garbage", b"not a value"), (b"empty", b""), (b"cut", good[:-1]),
                       (b"version", good[:8] + b"\x02" + good[9:]), (b"header", good[:13] + b"x" + good[14:]),
                       (b"type", unknown_type)):
        raw.blob_put("cuda.core", key, value)
        assert cache.get(key) is None, key
        assert raw.blob_get("cuda.core", key) is None, key  # removed: the compile after the miss stores anew
    stats = cache.stats()
    assert stats["undecodable"] == 6 and stats["get_misses"] == 6
    raw.blob_put("cuda.core", b"good", good)
    assert cache.get(b"good") == b"code"


def test_damaged_entry_is_a_miss_and_removed(cache, cache_dir):
    cache[b"k"] = b"x" * 4096
    (path,) = _entry_files(cache_dir)
    with open(path, "r+b") as file:
        file.seek(-300, os.SEEK_END)
        file.write(b"!")
    assert cache.get(b"k") is None
    assert not os.path.exists(path)
    assert cache.stats()["corrupt_removed"] == 1


def test_size_cap_evicts(cache_dir):
    with kiln.cuda_core.ProgramCache(cache_dir, max_size=64 * 1024) as capped:
        for i in range(30):
            capped[f"k{i}".encode()] = bytes([i]) * 8192
        assert len(capped) < 30 and capped.stats()["evictions"] > 0
        assert sum(os.path.getsize(path) for path in _entry_files(cache_dir)) <= 64 * 1024
        assert capped[b"k29"] == bytes([29]) * 8192


def test_bad_arguments(cache_dir, cache):
    for namespace, error in (("", ValueError), ("x" * 257, ValueError), ("a\0b", ValueError), (3, TypeError)):
        with pytest.raises(error, match="namespace"):
            kiln.cuda_core.ProgramCache(cache_dir, namespace=namespace)
    for size, error in ((0, ValueError), (-1, ValueError), ("1G", TypeError), (True, TypeError)):
        with pytest.raises(error, match="cache_max_size"):
            kiln.cuda_core.ProgramCache(cache_dir, max_size=size)
    with pytest.raises(ValueError, match="empty"):
        kiln.cuda_core.ProgramCache("")
    with pytest.raises(kiln.InvalidArgumentError, match="65537 bytes"):
        cache[b"k" * 65537] = b"v"
    cache.close()
    with pytest.raises(ValueError, match="closed"):
        cache.get(b"k")
    cache.close()  # twice is harmless


# --- against the stand-in cuda.core --------------------------------------------------------------


def test_is_cuda_cores_program_cache_resource(core, cache_dir):
    from cuda.core.utils import ProgramCacheResource
    with kiln.cuda_core.ProgramCache(cache_dir) as cache:
        assert isinstance(cache, ProgramCacheResource)


def test_symbol_mapping_survives(core, cache_dir):
    mapping = {"pc_scale<float>": b"_Z8pc_scaleIfEvPT_S0_j", b"pc_scale<int>": b"_Z8pc_scaleIiEvPT_S0_j"}
    stored = core.ObjectCode.from_cubin(b"\x7fELF...", name="mine.cu", symbol_mapping=mapping)
    with kiln.cuda_core.ProgramCache(cache_dir) as cache:
        cache[b"key"] = stored
    with kiln.cuda_core.ProgramCache(cache_dir) as fresh:
        assert fresh[b"key"] == b"\x7fELF..."  # cuda.core's contract: the code's bytes
        again = fresh.get_object_code(b"key")
        assert fresh.get_object_code(b"absent") is None
    assert isinstance(again, core.ObjectCode) and again.code == stored.code
    assert again.code_type == "cubin" and again.name == "mine.cu" and again.symbol_mapping == mapping


def test_symbol_mapping_survives_in_a_second_process(core, cache_dir, tmp_path):
    path = tmp_path / "kernel.ptx"
    path.write_bytes(b".version 8.0\n\0")
    with kiln.cuda_core.ProgramCache(cache_dir) as cache:
        # A path-backed ObjectCode (cuda.core's `code` is then the path; the stand-in's reads the file at
        # once, so it is spelled out here): its bytes are read now, and a later change to the file changes
        # nothing.
        path_backed = types.SimpleNamespace(code=str(path), code_type="ptx", name="p", symbol_mapping={"k": b"_Zk"})
        cache[b"ptx"] = path_backed
    path.write_bytes(b"changed")
    code = ("import kiln.cuda_core\n"
            f"cache = kiln.cuda_core.ProgramCache({cache_dir!r})\n"
            "oc = cache.get_object_code(b'ptx')\n"
            "print(oc.code, oc.code_type, oc.name, oc.symbol_mapping)\n")
    assert _child(code) == "b'.version 8.0\\n\\x00' ptx p {'k': b'_Zk'}"


def test_bare_bytes_need_a_code_type_to_rebuild(core, cache):
    cache[b"k"] = b"code"
    with pytest.raises(ValueError, match="pass code_type"):
        cache.get_object_code(b"k")
    rebuilt = cache.get_object_code(b"k", code_type="ptx")
    assert rebuilt.code == b"code" and rebuilt.code_type == "ptx" and rebuilt.symbol_mapping == {}


def test_an_abstract_method_kiln_lacks_is_named(core, monkeypatch):
    import abc

    import cuda.core.utils as utils

    class Wider(utils.ProgramCacheResource):
        @abc.abstractmethod
        def evict(self):
            """A method a later cuda.core might ask for."""

    monkeypatch.setattr(utils, "ProgramCacheResource", Wider)
    with pytest.raises(kiln.Error, match="abstract methods kiln does not implement \\(evict\\)"):
        kiln.cuda_core.ProgramCache  # noqa: B018 (the access makes the class)


def test_cuda_cores_own_compile_uses_it(core, cache_dir):
    """kiln.cuda_core not enabled: cuda.core's Program.compile(cache=...) keys, reads and stores through it."""
    chosen = options(core, name="own.cu")
    with kiln.cuda_core.ProgramCache(cache_dir) as cache:
        first = core.Program(KERNEL, "c++", chosen).compile("cubin", cache=cache)
        assert len(calls(core)) == 1 and len(cache) == 1
        second = core.Program(KERNEL, "c++", chosen).compile("cubin", cache=cache)
        assert second.code == first.code and second.name == "own.cu"
        stats = cache.stats()
        assert stats["get_misses"] == 1 and stats["get_hits"] == 1 and stats["stores"] == 1
        key = sys.modules["cuda.core.utils"].make_program_cache_key(code=KERNEL, code_type="c++", options=chosen,
                                                                   target_type="cubin")  # (imported by compile)
        # What cuda.core stored was its ObjectCode: kiln kept its name and code type.
        assert cache.get_object_code(key).name == "own.cu"
        with pytest.raises(ValueError, match="name_expressions"):
            core.Program(KERNEL, "c++", chosen).compile("cubin", name_expressions=["pc_scale<float>"], cache=cache)


def test_routed_compile_is_served_from_the_cache_folder(routed, cache_dir, tmp_path):
    """kiln.cuda_core enabled: a compile given a ProgramCache is kiln's, through that cache's folder,
    name expressions included; a second process finds it on disk."""
    core, _engine = routed
    folder = str(tmp_path / "program-cache")
    names = ("pc_scale<float>", "pc_scale<double>")
    with kiln.cuda_core.ProgramCache(folder) as cache:
        result = core.Program(KERNEL, "c++", options(core, name="r.cu")).compile("cubin", name_expressions=names,
                                                                                  cache=cache)
        assert calls(core) == []  # cuda.core's compile (and its refusal of name_expressions) never ran
        assert set(result.symbol_mapping) == set(names) and result.name == "r.cu"
        assert result.get_kernel("pc_scale<float>").symbol == result.symbol_mapping["pc_scale<float>"]
        assert cache.stats()["routed_misses"] == 1 and cache.stats()["misses"] == 1
        assert kiln.cuda_core.stats()["routed"] == {"compiled": 1}
    assert _entry_files(folder)  # the compile went to the cache's folder, not the routing engine's
    code = ("import json, kiln, kiln.cuda_core, cuda.core as core\n"
            "kiln.cuda_core.enable()\n"
            f"cache = kiln.cuda_core.ProgramCache({folder!r})\n"
            "options = core.ProgramOptions(arch='sm_90', name='r.cu')\n"
            f"result = core.Program({KERNEL!r}, 'c++', options).compile('cubin', name_expressions={names!r}, "
            "cache=cache)\n"
            "print(json.dumps({'stats': cache.stats(), 'routed': kiln.cuda_core.stats()['routed'],\n"
            "                  'code': result.code.hex(), 'mapping': {k: v.decode() for k, v in "
            "result.symbol_mapping.items()}}))\n")
    seen = json.loads(_child(code, KILN_CACHE_DIR=str(tmp_path / "elsewhere")))
    assert seen["routed"] == {"disk": 1} and seen["stats"]["routed_hits"] == 1 and seen["stats"]["hits"] == 1
    assert bytes.fromhex(seen["code"]) == result.code
    assert seen["mapping"] == {k: v.decode() for k, v in result.symbol_mapping.items()}


def test_routed_fallback_still_uses_the_cache(routed, cache_dir):
    """A request kiln leaves to cuda.core (here ptxas_options) goes to cuda.core's compile with the cache."""
    core, _engine = routed
    with kiln.cuda_core.ProgramCache(cache_dir) as cache:
        chosen = options(core, ptxas_options=["-v"])
        core.Program(KERNEL, "c++", chosen).compile("cubin", cache=cache)
        core.Program(KERNEL, "c++", chosen).compile("cubin", cache=cache)
        assert calls(core)[0]["cache"] is cache and len(cache) == 1
        assert cache.stats()["get_hits"] == 1 and cache.stats()["routed_hits"] == 0
