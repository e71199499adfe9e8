"""What triton.compile does with its cache manager (Triton 3.6), around a stand-in compiler: the kernel's
metadata group looked up first (a hit when it names the metadata file), else every stage put, the metadata
put, the group put; the compiled kernel read back from the group's paths. `compiles` counts real compiles.
TRITON_KERNEL_DUMP=1 also writes each stage through the dump manager."""

import hashlib
import json
import os
from pathlib import Path

from .runtime.cache import get_cache_manager, get_dump_manager

STAGES = ("source", "ttir", "ttgir", "llir", "ptx", "cubin")
compiles = 0


def _stage(source, stage, arch):
    """A deterministic stand-in for a compiler stage: text for the IRs, bytes for the binary."""
    digest = hashlib.sha256(f"{stage}:{arch}:{source}".encode()).hexdigest()
    if stage == "cubin":
        return b"\x7fELF" + bytes.fromhex(digest) * 64
    return f"// {stage} for sm_{arch}\n{source}\n// {digest}\n" * 8


class CompiledKernel:
    def __init__(self, metadata_group):
        metadata_path = next(Path(p) for name, p in metadata_group.items() if name.endswith(".json"))
        self.metadata = json.loads(metadata_path.read_text())
        self.name = self.metadata["name"]
        self.asm = {Path(p).suffix[1:]: (Path(p).read_bytes() if name.endswith(".cubin") else Path(p).read_text())
                    for name, p in metadata_group.items() if not name.endswith(".json")}
        self.metadata_group = metadata_group


def cache_key(name, source, arch):
    return hashlib.sha256(f"stand-in-3.6:{name}:{arch}:{source}".encode()).hexdigest()


def compile(name, source, arch=90):  # noqa: A001 (Triton's name)
    global compiles
    key = cache_key(name, source, arch)
    manager = get_cache_manager(key)
    metadata_filename = f"{name}.json"
    group = manager.get_group(metadata_filename) or {}
    if group.get(metadata_filename) is not None and not os.environ.get("TRITON_ALWAYS_COMPILE"):
        return CompiledKernel(group)
    compiles += 1
    dump = get_dump_manager(key) if os.environ.get("TRITON_KERNEL_DUMP") == "1" else None
    metadata = {"hash": key, "name": name, "num_warps": 4, "shared": 0, "triton_version": "3.6.0",
                "target": {"backend": "cuda", "arch": arch, "warp_size": 32}}
    for stage in STAGES:
        module = _stage(source, stage, arch)
        group[f"{name}.{stage}"] = manager.put(module, f"{name}.{stage}")
        if dump is not None:
            dump.put(module, f"{name}.{stage}")
    group[metadata_filename] = manager.put(json.dumps(metadata), metadata_filename, binary=False)
    manager.put_group(metadata_filename, group)
    return CompiledKernel(group)
