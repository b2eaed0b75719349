"""Messages in a byte stream, for servers reached over SSH: each protobuf message
is written as its length (4 bytes, big-endian) and its bytes. The control plane
reads `berth-agent exec`'s standard output this way; the agent writes it."""

import struct

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # a task log line or a result is far smaller


def frame(message) -> bytes:
    return pack(message.SerializeToString())


def pack(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data


def split(buffer: bytes):
    """(the complete frames' bytes, what is left over). ValueError on a frame
    longer than MAX_FRAME (not what an agent writes)."""
    out, at = [], 0
    while len(buffer) - at >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer, at)
        if size > MAX_FRAME:
            raise ValueError(f"a frame of {size} bytes")
        if len(buffer) - at - HEADER.size < size:
            break
        out.append(buffer[at + HEADER.size: at + HEADER.size + size])
        at += HEADER.size + size
    return out, buffer[at:]
