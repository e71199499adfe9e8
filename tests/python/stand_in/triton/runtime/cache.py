"""triton.runtime.cache's interface as Triton 3.6 has it, written for kiln's tests."""

import base64
import json
import os
import uuid
from abc import ABC, abstractmethod

from .. import knobs


class CacheManager(ABC):
    def __init__(self, key, override=False, dump=False):
        pass

    @abstractmethod
    def get_file(self, filename):
        pass

    @abstractmethod
    def put(self, data, filename, binary=True):
        pass

    @abstractmethod
    def get_group(self, filename):
        pass

    @abstractmethod
    def put_group(self, filename, group):
        pass


class FileCacheManager(CacheManager):
    """One folder per key under knobs.cache.dir (or the dump / override folder); files published by rename;
    a group is a "__grp__<name>" file listing its files' paths."""

    def __init__(self, key, override=False, dump=False):
        self.key = key
        if dump:
            base = knobs.cache.dump_dir
        elif override:
            base = knobs.cache.override_dir
        else:
            base = knobs.cache.dir
        self.cache_dir = os.path.join(base, key)
        if not override:
            os.makedirs(self.cache_dir, exist_ok=True)

    def _path(self, filename):
        return os.path.join(self.cache_dir, filename)

    def has_file(self, filename):
        return os.path.exists(self._path(filename))

    def get_file(self, filename):
        return self._path(filename) if self.has_file(filename) else None

    def get_group(self, filename):
        group_file = self._path("__grp__" + filename)
        if not os.path.exists(group_file):
            return None
        try:
            with open(group_file) as file:
                children = json.load(file).get("child_paths")
        except Exception:
            return None
        if children is None:
            return None
        return {name: path for name, path in children.items() if os.path.exists(path)}

    def put_group(self, filename, group):
        return self.put(json.dumps({"child_paths": group}), "__grp__" + filename, binary=False)

    def put(self, data, filename, binary=True):
        binary = isinstance(data, bytes)
        if not binary:
            data = str(data)
        staging = os.path.join(self.cache_dir, f"tmp.pid_{os.getpid()}_{uuid.uuid4()}")
        os.makedirs(staging, exist_ok=True)
        staged = os.path.join(staging, filename)
        with open(staged, "wb" if binary else "w") as file:
            file.write(data)
        final = self._path(filename)
        os.replace(staged, final)
        os.removedirs(staging)
        return final


def _base32(key):
    return base64.b32encode(bytes.fromhex(key)).decode().rstrip("=")


def _manager_class():
    return knobs.cache.manager_class or FileCacheManager


def get_cache_manager(key):
    return _manager_class()(_base32(key))


def get_override_manager(key):
    return _manager_class()(_base32(key), override=True)


def get_dump_manager(key):
    return _manager_class()(_base32(key), dump=True)
