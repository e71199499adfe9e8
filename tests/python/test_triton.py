"""kiln.triton: Triton's kernel cache kept by kiln, against the stand-in of Triton 3.6's cache interface
(tests/python/stand_in/triton: triton.runtime.cache, triton.knobs, and what triton.compile and the launcher
build do with a cache manager). No GPU, no Triton. What is checked:

  - the manager Triton gets from TRITON_CACHE_MANAGER is kiln's, a subclass of Triton's CacheManager;
  - put, get and groups across fresh processes: a second process compiles nothing, and its files are the
    first one's bytes; a launcher file on its own; a file of a group asked for by name;
  - a group is served whole or not at all: a flipped byte in kiln's entry, a half-built group (no
    put_group), a damaged file in the hand-over folder, a record in another format;
  - the size limit (LRU eviction) and the hand-over folder's own bound;
  - packs (export, mount, import) and an HTTP remote tier with and without the fleet MAC;
  - the CLI: `kiln cache ls/show/stats` name each group's kernel and target;
  - Triton's dump and override managers and an unsupported Triton keep Triton's FileCacheManager;
  - enable()/disable(), python -m kiln.triton, threads and processes racing on one key.
"""

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import warnings

import pytest

import kiln
from kiln import _native
from conftest import REPO, STAND_IN, stand_in, subprocess_env

MANAGER = "kiln.triton:CacheManager"


@pytest.fixture(autouse=True)
def label_api():
    version = kiln.api_version()
    if version < _native.LABEL_API_VERSION:
        pytest.skip(f"{kiln.library_path} has kiln API version {version}: kiln.triton's tests need 7")


@pytest.fixture
def triton(tmp_path, monkeypatch):
    """The stand-in Triton, freshly imported, with its cache folder in tmp_path; kiln.triton disabled after."""
    import kiln.triton
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("KILN_TRITON_DIR", raising=False)
    monkeypatch.delenv("TRITON_STAND_IN_VERSION", raising=False)
    with stand_in("triton", kiln.triton):
        import triton
        import triton.build
        import triton.compiler
        assert triton.__file__.startswith(STAND_IN), triton.__file__
        yield triton


@pytest.fixture
def kept(triton, tmp_path):
    """The stand-in Triton with its cache kept by kiln, in an engine of a fresh kiln cache."""
    import kiln.triton
    engine = kiln.Engine(cache_dir=str(tmp_path / "kiln-cache"), runtime=False)
    kiln.triton.enable(engine)
    return triton, engine


SOURCES = {"add_kernel": "x + y", "softmax_kernel": "exp(x) / sum(exp(x))", "norm_kernel": "(x - mean) / std"}

CHILD = r"""
import json, os, sys
import triton, triton.build, triton.compiler
import kiln.triton
out = {"kernels": {}, "launchers": []}
for name, source in json.loads(sys.argv[1]).items():
    kernel = triton.compiler.compile(name, source)
    out["kernels"][name] = {"cubin": kernel.asm["cubin"].hex()[:64], "size": len(kernel.asm["cubin"]),
                            "metadata": kernel.metadata, "paths": kernel.metadata_group}
for src in json.loads(sys.argv[2]):
    out["launchers"].append(triton.build.compile_module_from_src(src, "launcher"))
out["compiles"] = triton.compiler.compiles
out["builds"] = triton.build.builds
out["stats"] = kiln.triton.stats()
print(json.dumps(out))
"""


def _env(tmp_path, cache="kiln-cache", triton_dir="triton-cache", manager=True, **changes):
    env = {"PYTHONPATH": os.pathsep.join([STAND_IN, os.path.join(REPO, "python")]),
           "KILN_CACHE_DIR": str(tmp_path / cache), "TRITON_CACHE_DIR": str(tmp_path / triton_dir),
           "TRITON_CACHE_MANAGER": MANAGER if manager else None, "KILN_TRITON_DIR": None, "KILN_CACHE_PACKS": None,
           "KILN_REMOTE_CACHE": None, "KILN_REMOTE_SECRET_FILE": None, "KILN_CUPY": None, "KILN_CUDA_CORE": None}
    env.update(changes)
    return subprocess_env(**env)


def _run(tmp_path, kernels=SOURCES, launchers=("launcher-a",), expect_ok=True, **env):
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kernels), json.dumps(list(launchers))],
                            env=_env(tmp_path, **env), capture_output=True, text=True, timeout=120)
    if expect_ok:
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr
    return result


def _entries(cache_dir):
    return sorted(os.path.join(folder, name) for folder, _dirs, names in os.walk(os.path.join(cache_dir, "v1"))
                  for name in names if name.endswith(".kiln"))


def _kiln_cli():
    path = os.environ.get("KILN_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("no kiln CLI (KILN_CLI is set by ctest to the build's tools/kiln)")
    return path


def _cli(*args, cache_dir, check=True, **env):
    result = subprocess.run([_kiln_cli(), *args], env=subprocess_env(KILN_CACHE_DIR=str(cache_dir),
                                                                    KILN_CACHE_PACKS=None, **env),
                            capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


# --- the manager Triton gets ---------------------------------------------------------------------------


def test_import_does_not_import_triton():
    code = "import kiln.triton, sys; print('triton' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(PYTHONPATH=os.path.join(REPO, "python")),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_triton_gets_kilns_manager_from_the_environment(triton, monkeypatch):
    import kiln.triton
    from triton.runtime import cache
    monkeypatch.setenv("TRITON_CACHE_MANAGER", MANAGER)
    manager = cache.get_cache_manager("ab" * 32)
    assert type(manager) is kiln.triton.CacheManager
    assert isinstance(manager, cache.CacheManager)  # Triton's base class: its checks hold
    assert kiln.triton.CacheManager.__module__ == "kiln.triton"
    assert kiln.triton.enabled()
    assert repr(manager).startswith("kiln.triton.CacheManager(") and "kept by kiln" in repr(manager)


def test_put_get_and_groups_in_one_process(kept, tmp_path):
    triton, engine = kept
    import kiln.triton
    kernel = triton.compiler.compile("add_kernel", "x + y")
    assert triton.compiler.compiles == 1
    again = triton.compiler.compile("add_kernel", "x + y")  # a new manager: the group from kiln
    assert triton.compiler.compiles == 1
    assert again.asm == kernel.asm and again.metadata == kernel.metadata
    stats = kiln.triton.stats()
    assert stats["groups"]["misses"] == 1 and stats["groups"]["hits"] == {"disk": 1}
    assert stats["groups"]["stored"] == 1 and stats["files"]["stored"] == 0  # the files went into the group
    # One entry holds the whole group; the files are handed over in Triton's folder layout.
    assert engine.blob_count("triton") == 1
    key = os.path.basename(os.path.dirname(again.metadata_group["add_kernel.cubin"]))
    folder = os.path.join(str(tmp_path / "triton-cache"), key)
    assert sorted(os.listdir(folder)) == sorted(list(again.metadata_group) + ["__grp__add_kernel.json"])
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    with open(os.path.join(folder, "__grp__add_kernel.json")) as file:
        assert json.load(file)["child_paths"] == again.metadata_group  # Triton's own group file


def test_a_second_process_compiles_nothing(tmp_path):
    first, _ = _run(tmp_path)
    assert first["compiles"] == 3 and first["builds"] == 1
    assert first["stats"]["groups"]["stored"] == 3 and first["stats"]["files"]["stored"] == 1  # the launcher
    shutil.rmtree(tmp_path / "triton-cache")  # the hand-over folder is a copy: kiln's entries are the cache
    second, _ = _run(tmp_path)
    assert second["compiles"] == 0 and second["builds"] == 0
    assert second["stats"]["groups"]["hits"] == {"disk": 3} and second["stats"]["files"]["hits"] == {"disk": 1}
    assert second["kernels"] == first["kernels"]
    for kernel in second["kernels"].values():
        for path in kernel["paths"].values():
            assert path.startswith(str(tmp_path / "triton-cache"))
    assert len(_entries(tmp_path / "kiln-cache")) == 4


def test_without_kiln_the_stand_in_is_triton_as_shipped(tmp_path):
    plain, _ = _run(tmp_path, manager=False)
    assert plain["compiles"] == 3 and not os.path.exists(tmp_path / "kiln-cache" / "v1")
    again, _ = _run(tmp_path, manager=False)
    assert again["compiles"] == 0  # Triton's FileCacheManager, as shipped


def test_a_file_of_a_group_is_served_by_name(kept, tmp_path):
    triton, engine = kept
    compiled = triton.compiler.compile("add_kernel", "x + y")
    key = os.path.basename(os.path.dirname(compiled.metadata_group["add_kernel.cubin"]))
    shutil.rmtree(tmp_path / "triton-cache")
    import kiln.triton
    manager = kiln.triton.CacheManager(key)
    path = manager.get_file("add_kernel.cubin")  # lives inside the group's entry
    with open(path, "rb") as file:
        assert file.read() == compiled.asm["cubin"]
    assert manager.get_file("absent.cubin") is None
    group_file = manager.get_file("__grp__add_kernel.json")
    with open(group_file) as file:
        assert sorted(json.load(file)["child_paths"]) == sorted(compiled.metadata_group)
    assert manager.has_file("add_kernel.json") and not manager.has_file("nothing.json")


# --- whole or not at all ------------------------------------------------------------------------------


def test_a_flipped_byte_in_kilns_entry_is_never_handed_over(tmp_path):
    first, _ = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    (entry,) = _entries(tmp_path / "kiln-cache")
    with open(entry, "r+b") as file:
        file.seek(os.path.getsize(entry) // 2)  # inside the cubin's bytes
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x01]))
    shutil.rmtree(tmp_path / "triton-cache")
    second, _ = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    assert second["compiles"] == 1  # a miss: Triton compiled again
    assert second["stats"]["engine"]["corrupt_removed"] == 1
    assert second["kernels"] == first["kernels"]  # what Triton read is the compiler's, not the damaged bytes
    third, _ = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    assert third["compiles"] == 0


def test_a_damaged_handed_over_file_is_replaced(tmp_path):
    first, _ = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    path = first["kernels"]["add_kernel"]["paths"]["add_kernel.cubin"]
    with open(path, "r+b") as file:
        file.write(b"garbage")
    second, _ = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    assert second["compiles"] == 0
    assert second["kernels"] == first["kernels"]
    assert second["stats"]["handed_over"]["written_bytes"] == first["kernels"]["add_kernel"]["size"]  # that file only


def test_a_half_built_group_is_not_served(kept, tmp_path):
    triton, engine = kept
    import kiln.triton
    from triton.runtime.cache import get_cache_manager
    key = triton.compiler.cache_key("add_kernel", "x + y", 90)
    manager = get_cache_manager(key)
    assert manager.get_group("add_kernel.json") is None
    manager.put("ttir text", "add_kernel.ttir")
    manager.put(b"\x7fELF half", "add_kernel.cubin")  # ... and the compile dies before put_group
    del manager
    fresh = get_cache_manager(key)
    assert fresh.get_group("add_kernel.json") is None
    assert engine.blob_count("triton") == 0  # the held files were never stored
    kernel = triton.compiler.compile("add_kernel", "x + y")
    assert triton.compiler.compiles == 1 and kernel.asm["cubin"].startswith(b"\x7fELF") and len(kernel.asm) == 6


def test_a_record_in_another_format_is_a_miss_and_removed(kept, tmp_path):
    triton, engine = kept
    import kiln.triton
    from kiln.triton import _group
    key = triton.compiler.cache_key("add_kernel", "x + y", 90)
    from triton.runtime.cache import _base32
    engine.blob_put("triton", _group.group_key(_base32(key), "add_kernel.json"), b"not a group")
    triton.compiler.compile("add_kernel", "x + y")
    assert triton.compiler.compiles == 1
    assert kiln.triton.stats()["undecodable"] == 1
    triton.compiler.compile("add_kernel", "x + y")
    assert triton.compiler.compiles == 1


def test_the_record_format_round_trips_and_refuses_damage():
    from kiln.triton import _group
    files = {"k.ttir": b"ir", "k.cubin": bytes(range(256)), "k.json": b"{}"}
    record = _group.decode(_group.encode("k.json", files))
    assert record.name == "k.json" and record.files == files and list(record.files) == list(files)
    data = _group.encode("k.json", files)
    for bad in (data[:-1], data + b"x", b"kiln.tg\n\x02" + data[9:], data.replace(b'"k.json",2', b'"k.json",3'),
                _group.encode("k.json", {"k.ttir": b"ir"}), _group.encode("k.json", {"../x": b"", "k.json": b""})):
        with pytest.raises(_group.RecordError):
            _group.decode(bad)
    labels = _group.labels("__grp__k.json", json.dumps({"name": "k", "target": {"backend": "cuda", "arch": 90},
                                                        "triton_version": "3.6.0"}).encode())
    assert labels == {"file": "__grp__k.json", "kernel": "k", "target": "sm_90", "triton": "3.6.0"}
    assert _group.labels("x.so", None, "3.6.0") == {"file": "x.so", "triton": "3.6.0"}
    hip = _group.labels("g", json.dumps({"name": "k", "target": {"backend": "hip", "arch": "gfx942"}}).encode())
    assert hip["target"] == "gfx942"


# --- the size limit, packs, the remote tier -------------------------------------------------------------


def test_the_size_cap_evicts_groups_least_recently_used_first(tmp_path):
    many = {f"kernel_{i}": f"x * {i}" for i in range(12)}
    first, _ = _run(tmp_path, kernels=many, launchers=(), KILN_CACHE_MAXSIZE="40K")
    assert first["compiles"] == 12
    assert first["stats"]["engine"]["evictions"] > 0
    total = sum(os.path.getsize(path) for path in _entries(tmp_path / "kiln-cache"))
    assert total <= 40 * 1024
    # The most recently stored is still there; the first was evicted and compiles again.
    two = {"kernel_11": many["kernel_11"], "kernel_0": many["kernel_0"]}
    second, _ = _run(tmp_path, kernels=two, launchers=(), KILN_CACHE_MAXSIZE="40K")
    assert second["compiles"] == 1 and second["stats"]["groups"]["hits"] == {"disk": 1}
    assert second["kernels"] == {name: first["kernels"][name] for name in two}


def test_the_hand_over_folder_is_bounded(tmp_path):
    from kiln.triton import _files
    root = tmp_path / "root"
    for index in range(4):
        folder = root / f"KEY{index}"
        folder.mkdir(parents=True)
        (folder / "k.cubin").write_bytes(b"x" * 1000)
        (root / _files.MARKS).mkdir(exist_ok=True)
        mark = root / _files.MARKS / f"KEY{index}"
        mark.write_bytes(b"")
        os.utime(mark, (1000 + index, 1000 + index))
    (root / "NOT-KILNS").mkdir()
    (root / "NOT-KILNS" / "big").write_bytes(b"y" * 100000)
    assert _files.sweep(str(root), 10000) == []  # under the limit: nothing
    removed = _files.sweep(str(root), 2500)
    assert removed == ["KEY0", "KEY1"]  # the least recently marked, down to 90% of the limit
    assert sorted(os.listdir(root)) == [".kiln-triton", "KEY2", "KEY3", "NOT-KILNS"]
    os.utime(root / _files.MARKS / "KEY2")  # marked just now: spared
    assert _files.sweep(str(root), 1) == ["KEY3"]
    assert _files.parse_size("512M") == 512 << 20 and _files.parse_size("2G") == 2 << 30
    with pytest.raises(ValueError):
        _files.parse_size("lots")


def test_a_pack_of_a_warmed_run_makes_a_fresh_node_start_warm(tmp_path):
    _kiln_cli()
    first, _ = _run(tmp_path)
    pack = tmp_path / "triton.kpack"
    _cli("cache", "export", str(pack), cache_dir=tmp_path / "kiln-cache")
    # A node with empty caches, the pack mounted: every group and the launcher from it, nothing compiled.
    mounted, _ = _run(tmp_path, cache="node-b", triton_dir="node-b-triton", KILN_CACHE_PACKS=str(pack))
    assert mounted["compiles"] == 0 and mounted["builds"] == 0
    assert mounted["stats"]["groups"]["hits"] == {"pack": 3} and mounted["stats"]["files"]["hits"] == {"pack": 1}
    assert mounted["kernels"] == {name: {**kernel, "paths": mounted["kernels"][name]["paths"]}
                                  for name, kernel in first["kernels"].items()}
    # Imported (each entry verified) into another empty cache: hits from its disk.
    _cli("cache", "import", str(pack), cache_dir=tmp_path / "node-c")
    imported, _ = _run(tmp_path, cache="node-c", triton_dir="node-c-triton")
    assert imported["compiles"] == 0 and imported["stats"]["groups"]["hits"] == {"disk": 3}


class _Objects(http.server.BaseHTTPRequestHandler):
    """A WebDAV-ish object store (GET, HEAD, PUT, DELETE), as kiln's HTTP tier speaks to nginx."""
    protocol_version = "HTTP/1.1"
    objects = None

    def log_message(self, *args):
        pass

    def _answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        body = self.objects.get(self.path)
        self._answer(200, body) if body is not None else self._answer(404)

    def do_HEAD(self):
        self.do_GET()

    def do_PUT(self):
        self.objects[self.path] = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer(201)

    def do_DELETE(self):
        self._answer(204 if self.objects.pop(self.path, None) is not None else 404)


@pytest.fixture
def object_store():
    handler = type("Handler", (_Objects,), {"objects": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/kiln", handler.objects
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_tier_fills_a_second_node_and_the_fleet_mac_guards_it(tmp_path, object_store):
    url, objects = object_store
    secret = tmp_path / "fleet-secret"
    secret.write_text("a fleet secret of enough length\n")
    secret.chmod(0o600)
    remote = {"KILN_REMOTE_CACHE": url, "KILN_REMOTE_SECRET_FILE": str(secret)}
    first, _ = _run(tmp_path, **remote)
    assert first["compiles"] == 3
    assert len(objects) == 4  # three groups and the launcher, published as the first node closed its engine
    second, _ = _run(tmp_path, cache="node-b", triton_dir="node-b-triton", **remote)
    assert second["compiles"] == 0 and second["builds"] == 0
    assert second["stats"]["groups"]["hits"] == {"remote": 3}
    # A node with another fleet secret refuses what the server holds: it compiles, never uses those bytes.
    other = tmp_path / "other-secret"
    other.write_text("another secret of enough length\n")
    other.chmod(0o600)
    third, _ = _run(tmp_path, cache="node-c", triton_dir="node-c-triton", KILN_REMOTE_CACHE=url,
                    KILN_REMOTE_SECRET_FILE=str(other))
    assert third["compiles"] == 3
    assert third["stats"]["engine"]["remote_unauthenticated"] >= 3
    assert third["kernels"] == {name: {**kernel, "paths": third["kernels"][name]["paths"]}
                                for name, kernel in first["kernels"].items()}


# --- the CLI -----------------------------------------------------------------------------------------------


def test_the_cli_names_tritons_entries(tmp_path):
    _run(tmp_path)
    cache = tmp_path / "kiln-cache"
    listed = json.loads(_cli("cache", "ls", "--json", cache_dir=cache).stdout)
    groups = {item["labels"]["kernel"]: item for item in listed if "kernel" in item["labels"]}
    assert sorted(groups) == sorted(SOURCES)
    for name, item in groups.items():
        assert item["payload_kind"] == "blob" and item["target"] == "sm_90"
        assert item["source"] == f"triton __grp__{name}.json" and item["labels"]["triton"] == "3.6.0"
    (launcher,) = [item for item in listed if "kernel" not in item["labels"]]
    assert launcher["source"] == "triton launcher.cpython-311-x86_64-linux-gnu.so"
    text = _cli("cache", "ls", cache_dir=cache).stdout
    assert any("sm_90" in line and "triton __grp__add_kernel.json" in line and line.rstrip().endswith("add_kernel")
               for line in text.splitlines()), text
    shown = _cli("cache", "show", groups["add_kernel"]["key"][:12], cache_dir=cache).stdout
    assert "namespace triton" in shown and "kernel = add_kernel" in shown and "target = sm_90" in shown
    stats = _cli("cache", "stats", cache_dir=cache).stdout
    assert "blob triton sm_90" in stats
    assert _cli("cache", "verify", cache_dir=cache).returncode == 0
    # prune --target sm_90 takes the kernels' groups and leaves the launcher; the next run compiles them.
    _cli("cache", "prune", "--target", "sm_90", cache_dir=cache)
    assert [item["source"] for item in json.loads(_cli("cache", "ls", "--json", cache_dir=cache).stdout)] == \
        [launcher["source"]]
    again, _ = _run(tmp_path)
    assert again["compiles"] == 3 and again["builds"] == 0


# --- what stays Triton's ------------------------------------------------------------------------------------


def test_dump_and_override_managers_stay_tritons(kept, tmp_path, monkeypatch):
    triton, engine = kept
    import kiln.triton
    from triton.runtime.cache import FileCacheManager, get_dump_manager, get_override_manager
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(tmp_path / "override"))
    monkeypatch.setenv("TRITON_KERNEL_DUMP", "1")
    triton.compiler.compile("add_kernel", "x + y")
    key = triton.compiler.cache_key("add_kernel", "x + y", 90)
    dump = get_dump_manager(key)
    assert isinstance(dump, kiln.triton.CacheManager) and dump.cache_dir == os.path.join(str(tmp_path / "dump"),
                                                                                           dump.key)
    assert sorted(os.listdir(dump.cache_dir)) == sorted(f"add_kernel.{stage}" for stage in triton.compiler.STAGES)
    override = get_override_manager(key)
    assert override.get_file("add_kernel.ttir") is None and override.has_file("x") is False
    assert isinstance(override._delegate, FileCacheManager)
    assert kiln.triton.stats()["delegated"] == {"dump": 2, "override": 1}
    assert engine.blob_count("triton") == 1  # only the group: the dump stayed in Triton's dump folder


def test_an_unsupported_triton_is_refused_or_warned_about(tmp_path):
    env = {"TRITON_STAND_IN_VERSION": "4.0.0"}
    code = ("import kiln, kiln.triton\n"
            "try:\n    kiln.triton.enable()\nexcept kiln.Error as error:\n    print('refused:', error)\n")
    result = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, manager=False, **env),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "refused: kiln.triton supports Triton 3.0.x" in result.stdout and "this is Triton 4.0.0" in result.stdout
    # Through the environment: a warning, and Triton's own cache (nothing in kiln's).
    child, stderr = _run(tmp_path, **env)
    assert child["compiles"] == 3
    assert "TRITON_CACHE_MANAGER=kiln.triton:CacheManager: kiln.triton supports Triton" in stderr
    assert stderr.count("kiln.triton supports Triton") == 1
    assert child["stats"]["delegated"] == {"unsupported Triton": 4}
    assert not os.path.exists(tmp_path / "kiln-cache" / "v1")
    again, _ = _run(tmp_path, **env)
    assert again["compiles"] == 0  # Triton's FileCacheManager kept them


def test_a_changed_cache_interface_is_refused(triton, monkeypatch):
    import kiln.triton
    from triton.runtime import cache

    class Different(cache.CacheManager):
        def __init__(self, key, dump=False):
            pass

    monkeypatch.setattr(cache, "FileCacheManager", Different)
    with pytest.raises(kiln.Error, match="is not made as FileCacheManager"):
        kiln.triton.enable()
    assert os.environ.get("TRITON_CACHE_MANAGER") is None


def test_enable_disable_and_the_knob(triton, monkeypatch):
    import kiln.triton
    from triton import knobs
    from triton.runtime import cache
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:FileCacheManager")
    assert not kiln.triton.enabled()
    kiln.triton.enable()
    kiln.triton.enable()  # twice is harmless
    assert os.environ["TRITON_CACHE_MANAGER"] == MANAGER and kiln.triton.enabled()
    assert type(cache.get_cache_manager("cd" * 32)) is kiln.triton.CacheManager
    kiln.triton.disable()
    assert os.environ["TRITON_CACHE_MANAGER"] == "triton.runtime.cache:FileCacheManager"
    assert not kiln.triton.enabled()
    # A program that set the knob itself: enable() sets it, disable() puts its class back.
    knobs.cache.manager_class = cache.FileCacheManager
    kiln.triton.enable()
    assert knobs.cache.manager_class is kiln.triton.CacheManager
    kiln.triton.disable()
    assert knobs.cache.manager_class is cache.FileCacheManager


def test_python_m_kiln_triton_runs_a_program(tmp_path):
    program = tmp_path / "program.py"
    program.write_text("import os, sys, triton.compiler\n"
                       "triton.compiler.compile('add_kernel', 'x + y')\n"
                       "print(os.environ['TRITON_CACHE_MANAGER'], sys.argv[1:], triton.compiler.compiles)\n")
    env = _env(tmp_path, manager=False)
    for expected in ("1", "0"):
        result = subprocess.run([sys.executable, "-m", "kiln.triton", str(program), "--flag"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [MANAGER, "['--flag']", expected]
    usage = subprocess.run([sys.executable, "-m", "kiln.triton"], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage: python -m kiln.triton" in usage.stderr


def test_threads_and_processes_racing_on_one_key(tmp_path, kept):
    triton, engine = kept
    errors = []

    def compile_it():
        try:
            kernel = triton.compiler.compile("add_kernel", "x + y")
            assert kernel.asm["cubin"].startswith(b"\x7fELF")
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=compile_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert engine.blob_count("triton") == 1
    # Processes: four at once on one kiln cache and one hand-over folder, then one that must compile nothing.
    children = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(SOURCES), "[]"], env=_env(tmp_path, "shared"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), [err for _out, err in outputs]
    kernels = [json.loads(out.strip().splitlines()[-1])["kernels"] for out, _err in outputs]
    assert all(found == kernels[0] for found in kernels)
    last, _ = _run(tmp_path, cache="shared", launchers=())
    assert last["compiles"] == 0 and last["kernels"] == kernels[0]


def test_a_read_only_cache_stores_nothing_and_fails_nothing(tmp_path):
    _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=())
    readonly, _ = _run(tmp_path, KILN_CACHE_READONLY="1")
    assert readonly["compiles"] == 2  # the two kernels it did not have
    assert readonly["stats"]["groups"]["not_stored"] == 2 and readonly["stats"]["groups"]["hits"] == {"disk": 1}


def test_a_foreign_hand_over_root_is_not_used(tmp_path):
    root = tmp_path / "shared-root"
    root.mkdir()
    root.chmod(0o777)  # writable by anyone: not private
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        child, stderr = _run(tmp_path, kernels={"add_kernel": "x + y"}, launchers=(), KILN_TRITON_DIR=str(root))
    assert "not in " + str(root) in stderr and "others may write to it" in stderr
    assert not any(path.startswith(str(root)) for path in child["kernels"]["add_kernel"]["paths"].values())
    assert os.listdir(root) == []


def test_a_forked_child_keeps_its_own_engine(tmp_path):
    code = r"""
import json, multiprocessing, os, sys
import triton.compiler, kiln.triton
triton.compiler.compile("parent_kernel", "x")
def in_child():
    triton.compiler.compile("child_kernel", "y")
    sys.exit(0 if triton.compiler.compiles == 2 else 3)
child = multiprocessing.get_context("fork").Process(target=in_child)
child.start()
child.join(60)
print(json.dumps({"exitcode": child.exitcode, "compiles": triton.compiler.compiles}))
"""
    env = _env(tmp_path)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"exitcode": 0, "compiles": 1}
    again, _ = _run(tmp_path, kernels={"parent_kernel": "x", "child_kernel": "y"}, launchers=())
    assert again["compiles"] == 0  # both stored: the child's through an engine of its own
