"""What Triton's launcher build (triton.runtime.build.compile_module_from_src) does with its cache manager: a
module file looked up by name, else built and put; `builds` counts real builds."""

import hashlib

from .runtime.cache import get_cache_manager

builds = 0


def compile_module_from_src(src, name):
    """The path of the module built from `src` (a stand-in "shared object": bytes derived from the source)."""
    global builds
    key = hashlib.sha256(f"stand-in-launcher:{src}".encode()).hexdigest()
    manager = get_cache_manager(key)
    filename = f"{name}.cpython-311-x86_64-linux-gnu.so"
    path = manager.get_file(filename)
    if path is None:
        builds += 1
        path = manager.put(b"\x7fELF launcher " + src.encode() * 32, filename, binary=True)
    with open(path, "rb") as file:
        if file.read() != b"\x7fELF launcher " + src.encode() * 32:
            raise RuntimeError(f"{path} does not hold the module built from its source")
    return path
