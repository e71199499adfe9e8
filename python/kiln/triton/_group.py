"""What kiln.triton stores: the kiln keys of Triton's files and groups, the group record's format, and the
labels `kiln cache ls/show/stats` show beside them.

Keys (namespace "triton", libkiln's blobs: every entry checksummed, size-capped, in packs and the remote
tiers like any other):
    <Triton's key>/file/<file name>     a file Triton put on its own (a launcher .so, autotune results)
    <Triton's key>/group/<file name>    a group: every file of one compiled kernel, in one record
Triton's key is its base32 cache key (a folder name in Triton's own cache) and a file name never holds a
"/", so the two kinds never meet and neither meets another key.

The group record, version 1 (one blob's payload; the entry's checksum covers it whole):
    magic    8 bytes  b"kiln.tg\\n"
    version  1 byte   1
    length   4 bytes  little-endian: the header's size
    header   UTF-8 JSON object: {"group": <the group's file name, e.g. "add_kernel.json">,
                                 "files": [[<file name>, <size>], ...]}  (names unique, in Triton's order)
    data     the files' bytes, one after another, exactly as the sizes say (nothing before, between or after)
A record that does not follow it, whose group does not name itself, or that lacks the group's own file
(Triton's metadata, <stem>.json) is not a group: a miss, and removed.
"""

import json

from .. import _record

NAMESPACE = "triton"
GROUP_PREFIX = "__grp__"  # Triton's name for a group's own file (FileCacheManager: "__grp__<file name>")
MAGIC = b"kiln.tg\n"
VERSION = 1
_MAX_NAME = 255  # a file name: one path component


class RecordError(ValueError):
    """A stored group that is not in the format above."""


def name_problem(name):
    """Why `name` cannot be a Triton file's name here (a folder component), or None."""
    if not isinstance(name, str):
        return f"a file name must be a str, got {type(name).__name__}"
    if not name or name in (".", ".."):
        return f"{name!r} is not a file name"
    if "/" in name or "\0" in name:
        return f"{name!r} holds a '/' or a NUL byte"
    if len(name.encode(errors="surrogatepass")) > _MAX_NAME:
        return f"a file name of more than {_MAX_NAME} bytes ({name[:40]!r}...)"
    return None


def file_key(key, name):
    return f"{key}/file/{name}"


def group_key(key, name):
    return f"{key}/group/{name}"


def stem(name):
    """The name without its last suffix: Triton names a kernel's files <stem>.<ext> and its group after the
    metadata file, <stem>.json ("add_kernel.cubin" and "add_kernel.json": "add_kernel")."""
    return name.rsplit(".", 1)[0] if "." in name else name


def group_of(name):
    """The group a kernel's file belongs to by Triton's naming: "<stem>.json"."""
    return stem(name) + ".json"


class Record:
    """A decoded group: its name and {file name: bytes}, in stored order."""

    __slots__ = ("name", "files", "origin")

    def __init__(self, name, files):
        self.name, self.files, self.origin = name, files, None


def encode(name, files):
    """The stored form of the group `name` holding `files` ({file name: bytes}, in order)."""
    return _record.frame(MAGIC, VERSION, {"group": name, "files": [[child, len(data)] for child, data in files.items()]},
                         *files.values())


def decode(data):
    """The Record a stored group holds; RecordError when it is not one (see the format above)."""
    header, body = _record.unframe(data, MAGIC, VERSION, "a kiln.triton group", RecordError)
    if not isinstance(header.get("group"), str) or name_problem(header["group"]):
        raise RecordError("the header names no group")
    listed = header.get("files")
    if not isinstance(listed, list) or not all(isinstance(item, list) and len(item) == 2 for item in listed):
        raise RecordError("files is not a list of [name, size]")
    files = {}
    offset = 0
    for child, size in listed:
        if name_problem(child) or child in files:
            raise RecordError(f"a bad or repeated file name {child!r}")
        if type(size) is not int or size < 0 or offset + size > len(body):
            raise RecordError(f"{child}: size {size!r} runs past the record's {len(data)} bytes")
        files[child] = bytes(body[offset:offset + size])
        offset += size
    if offset != len(body):
        raise RecordError(f"{len(body) - offset} bytes after the last file")
    if header["group"] not in files:
        raise RecordError(f"the group lacks its own file {header['group']}")
    return Record(header["group"], files)


def _target(target):
    """A target id for Triton's metadata target ({"backend": "cuda", "arch": 90, ...}): "sm_90", "gfx942"."""
    if not isinstance(target, dict):
        return None
    backend, arch = target.get("backend"), target.get("arch")
    if backend == "cuda" and isinstance(arch, int):
        return f"sm_{arch}"
    if backend == "hip" and isinstance(arch, str) and arch.startswith("gfx"):
        return arch
    if isinstance(backend, str) and arch is not None:
        return f"{backend}:{arch}"
    return None


def _label(value):
    text = str(value).replace("\0", "")
    return text[:1000]


def labels(file_label, metadata=None, version=None):
    """The labels of a stored file or group (kiln.h's blob labels): `file` (the SOURCE column of `kiln cache
    ls`: the file's name, or "__grp__<metadata file>" for a group), and for a group, from Triton's metadata
    (`metadata`: the bytes of its <stem>.json), `kernel` and `target` (the KERNELS and TARGET columns); `triton`
    the version that made it."""
    out = {"file": file_label}
    try:
        parsed = json.loads(metadata.decode()) if metadata is not None else None
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        if isinstance(parsed.get("name"), str):
            out["kernel"] = _label(parsed["name"])
        target = _target(parsed.get("target"))
        if target:
            out["target"] = _label(target)
        version = parsed.get("triton_version") or version
    if version:
        out["triton"] = _label(version)
    return out
