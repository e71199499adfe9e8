"""kiln.triton.CacheManager: Triton's cache manager (triton.runtime.cache.CacheManager) over kiln's cache.

Triton calls, per cache key (a base32 hash of a kernel's source, options and Triton itself):
    get_group("<stem>.json")      -> {file name: path} of a compiled kernel's files, or None (then it compiles)
    put(data, name)                -> the path of a file it made (each IR stage, the binary, the metadata)
    put_group("<stem>.json", {name: path})   the files of that kernel, once all are put
    get_file(name) / put(data, name)         a file on its own (a launcher .so, autotune results)
Here a group is one kiln entry holding every file of the kernel, stored by put_group: get_group serves it
whole, from bytes kiln checked, or not at all, so a kernel's metadata is never paired with another build's
binary, and a half-written group is never seen. Files put while the group they belong to is being built (a
get_group that missed in this manager named it) are held in memory until put_group stores them inside it; a
group that never comes (a compile that failed half way) is not stored. Other files are stored at once, each
its own entry. Every file Triton is handed is written from kiln's checked bytes into a private folder
(_files.py). Keys, the record's format and the labels `kiln cache ls` shows: _group.py.

Triton's dump and override managers (TRITON_KERNEL_DUMP, TRITON_KERNEL_OVERRIDE: made with dump=True or
override=True) stay Triton's own FileCacheManager, as does every manager where kiln does not support the
Triton (a warning once, never an error: TRITON_CACHE_MANAGER must not make a program fail).
"""

import json
import os
import stat
import sys
import time

from .. import _native
from ..errors import Error
from . import _files, _group, _patch, _state, _stats

_classes = {}  # Triton's CacheManager class (or None) -> the class made with it


def _name(filename):
    problem = _group.name_problem(filename)
    if problem:
        raise ValueError(f"kiln.triton: {problem}")
    return filename


def _read_regular(path):
    """The bytes of a regular file at `path` (a str), or None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def _file_manager():
    from triton.runtime.cache import FileCacheManager

    return FileCacheManager


def _triton_version():
    return getattr(sys.modules.get("triton"), "__version__", None)


class CacheManagerMethods:
    """Triton's cache kept by kiln (see the module's text). TRITON_CACHE_MANAGER=kiln.triton:CacheManager, or
    kiln.triton.enable(), makes Triton use it; Triton makes one per cache key."""

    def __init__(self, key, override=False, dump=False):
        self.key = key
        self._delegate = None
        reason = "dump" if dump else "override" if override else None
        if reason is None:
            refused = _patch.problem()
            if refused:
                _patch.warn_refused(refused)
                reason = "unsupported Triton"
        if reason is not None:
            self._delegate = _file_manager()(key, override=override, dump=dump)
            _stats.delegated(reason)
            return
        problem = _group.name_problem(key) if isinstance(key, str) else "the key is not a str"
        if problem:
            raise ValueError(f"kiln.triton: Triton's cache key: {problem}")
        self._engine = _state.engine()
        self._labels = _native.load()[2] >= _native.LABEL_API_VERSION
        self._folder = _files.Folder(key)
        self._put = {}  # file name -> bytes put through this manager (a group's files are held here for put_group)
        self._building = set()  # stems of the groups get_group missed here: their files wait for put_group
        self._paths = {}  # file name -> (path, bytes) this manager handed over

    def __getattr__(self, name):
        # A delegating manager is Triton's own FileCacheManager for everything else (cache_dir, has_file, ...).
        delegate = self.__dict__.get("_delegate")
        if delegate is not None:
            return getattr(delegate, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        kept = "Triton's FileCacheManager" if self._delegate is not None else "kiln"
        return f"kiln.triton.CacheManager({self.key!r}, kept by {kept})"

    @property
    def cache_dir(self):
        """The folder Triton's files of this key are handed over in (FileCacheManager's attribute)."""
        return self._delegate.cache_dir if self._delegate is not None else self._folder.path

    # --- what Triton calls ------------------------------------------------------------------------

    def get_file(self, filename):
        if self._delegate is not None:
            return self._delegate.get_file(filename)
        name = _name(filename)
        if name in self._put:
            return self._hand_over({name: self._put[name]})[name]
        found = self._find(_group.file_key(self.key, name))
        if found is None and name.startswith(_group.GROUP_PREFIX):
            # Triton's own group file: the group, handed over whole (its files and that file).
            record = self._find_group(name[len(_group.GROUP_PREFIX):], count=False)
            if record is None:
                _stats.count("files", "misses")
                return None
            _stats.hit("files", record.origin)
            return self._hand_over_group(record)
        if found is None:
            # A file of a kernel's group lives in the group's entry (Triton names its files <stem>.<ext>).
            record = self._find_group(_group.group_of(name), count=False)
            if record is not None and name in record.files:
                found = (record.files[name], record.origin)
        if found is None:
            _stats.count("files", "misses")
            return None
        _stats.hit("files", found[1])
        return self._hand_over({name: found[0]})[name]

    def has_file(self, filename):
        return self.get_file(filename) is not None

    def put(self, data, filename, binary=True):
        if self._delegate is not None:
            return self._delegate.put(data, filename, binary=binary)
        name = _name(filename)
        # As Triton's FileCacheManager: bytes as they are, anything else as its text (an IR module's str()).
        value = data if isinstance(data, bytes) else str(data).encode("utf-8")
        self._put[name] = value
        if _group.stem(name) not in self._building:  # (a file of the group being built is stored by put_group)
            self._store(_group.file_key(self.key, name), value, _group.labels(name, version=_triton_version()),
                        "files")
        return self._hand_over({name: value})[name]

    def get_group(self, filename):
        if self._delegate is not None:
            return self._delegate.get_group(filename)
        name = _name(filename)
        record = self._find_group(name)
        if record is None:
            self._building.add(_group.stem(name))
            return None
        try:
            paths = self._hand_over(record.files)
            self._write_group_file(name, paths)
        except OSError as error:
            _files._warn_once(f"a group cannot be handed over in {self._folder.path} ({error}): Triton compiles it")
            self._building.add(_group.stem(name))
            return None
        return paths

    def put_group(self, filename, group):
        if self._delegate is not None:
            return self._delegate.put_group(filename, group)
        name = _name(filename)
        files = {}
        for child, path in dict(group).items():
            child = _name(child)
            data = self._put.get(child)
            if data is None:
                found = self._find(_group.file_key(self.key, child))  # stored on its own, checked
                data = found[0] if found is not None else None
            if data is None:
                data = _read_regular(path)  # a file the caller made itself
            if data is None:
                _stats.count("groups", "incomplete")
                _files._warn_once(f"a group ({name}) names a file kiln does not have ({child}): the group is not "
                                  "stored, Triton compiles the kernel again next time")
                self._building.discard(_group.stem(name))
                return None
            files[child] = data
        labels = _group.labels(_group.GROUP_PREFIX + name, files.get(name), _triton_version())
        self._store(_group.group_key(self.key, name), _group.encode(name, files), labels, "groups")
        self._building.discard(_group.stem(name))
        return self._write_group_file(name, self._hand_over(files))

    # --- inside -----------------------------------------------------------------------------------

    def _store(self, key, data, labels, kind):
        started = time.perf_counter()
        stored = self._engine.blob_put(_group.NAMESPACE, key, data, labels if self._labels else None)
        _stats.kiln_seconds(time.perf_counter() - started)
        if kind is not None:
            _stats.count(kind, "stored" if stored else "not_stored")

    def _find(self, key):
        """(bytes, origin) under `key` (checked by kiln), or None."""
        started = time.perf_counter()
        found = self._engine.blob_find(_group.NAMESPACE, key)
        _stats.kiln_seconds(time.perf_counter() - started)
        return found

    def _find_group(self, name, count=True):
        """The group `name` (a Record, its origin in .origin), or None; counted when `count`."""
        key = _group.group_key(self.key, name)
        found = self._find(key)
        if found is None:
            if count:
                _stats.count("groups", "misses")
            return None
        try:
            record = _group.decode(found[0])
            if record.name != name:
                raise _group.RecordError(f"the record is group {record.name}, stored as {name}")
        except _group.RecordError:
            # Not a group kiln.triton can serve (another format, a foreign writer): a miss, and removed so
            # that the compile that follows stores one every reader can use.
            self._engine.blob_remove(_group.NAMESPACE, key)
            _stats.count(None, "undecodable")
            if count:
                _stats.count("groups", "misses")
            return None
        if count:
            _stats.hit("groups", found[1])
        record.origin = found[1]
        return record

    def _hand_over(self, files):
        """{name: path} of `files` ({name: bytes}) written in this key's folder (_files.Folder.write)."""
        started = time.perf_counter()
        before = self._folder.written
        paths, size = {}, 0
        for name, data in files.items():
            known = self._paths.get(name)
            if known is not None and known[1] is data:
                paths[name] = known[0]  # written by this manager from these very bytes
                continue
            paths[name] = self._folder.write(name, data)
            self._paths[name] = (paths[name], data)
            size += len(data)
        _stats.handed_over(len(files), size, self._folder.written - before, time.perf_counter() - started)
        return paths

    def _hand_over_group(self, record):
        return self._write_group_file(record.name, self._hand_over(record.files))

    def _write_group_file(self, name, paths):
        """Triton's own group file beside the files ({"child_paths": {name: path}}), so the folder reads as a
        Triton cache to tools that look (and to a Triton without kiln); its path."""
        text = json.dumps({"child_paths": paths}).encode()
        return self._folder.write(_group.GROUP_PREFIX + name, text)


def _cache_manager_base():
    """triton.runtime.cache.CacheManager, or None where Triton is not importable."""
    try:
        from triton.runtime.cache import CacheManager
    except ImportError:
        return None
    return CacheManager if isinstance(CacheManager, type) else None


def manager_class():
    """kiln.triton.CacheManager: CacheManagerMethods over Triton's CacheManager when Triton imports (so that
    isinstance checks hold), made once per base class. Raises kiln.Error naming what Triton's base declares
    abstract and this class lacks."""
    base = _cache_manager_base()
    found = _classes.get(base)
    if found is None:
        bases = (CacheManagerMethods,) if base is None else (CacheManagerMethods, base)
        metaclass = type if base is None else type(base)
        found = metaclass("CacheManager", bases, {"__doc__": CacheManagerMethods.__doc__, "__module__": "kiln.triton",
                                                   "__qualname__": "CacheManager"})
        missing = sorted(getattr(found, "__abstractmethods__", ()))
        if missing:
            raise Error(f"kiln.triton.CacheManager: Triton's CacheManager declares abstract methods kiln does not "
                        f"implement ({', '.join(missing)})")
        _classes[base] = found
    return found
