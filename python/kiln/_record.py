"""The framing kiln's Python packages store their values in, as blobs of libkiln's cache: an 8-byte magic, a
version byte, a 4-byte little-endian header length, a UTF-8 JSON header (an object), then the value's bytes.
kiln.cuda_core's ProgramCache values and kiln.triton's kernel groups each name their own magic, version and
header fields; the checks of the frame, and their messages, are these."""

import json
import struct

PREFIX = struct.Struct("<8sBI")  # magic, version, header length


def frame(magic, version, header, *payloads):
    """The stored form: the prefix, `header` (a dict) as compact JSON, then the payloads."""
    text = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([PREFIX.pack(magic, version, len(text)), text, *(bytes(p) for p in payloads)])


def unframe(data, magic, version, what, error):
    """(header dict, the bytes after it) of a stored value; `error` (an exception class) with a message naming
    `what` ("a kiln.triton group") when `data` is not one of that magic and version."""
    if len(data) < PREFIX.size:
        raise error(f"{len(data)} bytes: shorter than {what}'s {PREFIX.size}-byte prefix")
    found_magic, found_version, length = PREFIX.unpack_from(data)
    if found_magic != magic:
        raise error(f"not {what} (no magic)")
    if found_version != version:
        raise error(f"{what} in format version {found_version}; this kiln reads version {version}")
    if length > len(data) - PREFIX.size:
        raise error(f"a header of {length} bytes in {what} of {len(data)}")
    try:
        header = json.loads(bytes(data[PREFIX.size:PREFIX.size + length]).decode())
    except (UnicodeDecodeError, ValueError) as problem:
        raise error(f"the header is not UTF-8 JSON: {problem}") from None
    if not isinstance(header, dict):
        raise error("the header is not a JSON object")
    return header, data[PREFIX.size + length:]
