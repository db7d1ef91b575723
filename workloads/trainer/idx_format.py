"""The idx format of MNIST and FashionMNIST (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"):
a magic number 0x00 0x00 <type> <number of dimensions>, each dimension as a 4-byte big-endian
integer, then the data, C order, nothing after it.

Reading is streamed and bounded by the header: `read_header` takes the dimensions, refuses any that
is not positive or above the caller's limit, and `read_data` then reads at most the declared size
plus one byte. A lying header or a gzip bomb (5 MB that inflate to 3.7 GB) costs at most the limit.
"""

from __future__ import annotations

import struct
from io import BufferedIOBase

UNSIGNED_BYTE = 0x08
TYPE_NAMES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "short", 0x0C: "int", 0x0D: "float",
              0x0E: "double"}


class IdxError(ValueError):
    """The stream is not an unsigned-byte idx file of the expected shape."""


def _read(stream: BufferedIOBase, size: int) -> bytes:
    data = stream.read(size)
    return data if isinstance(data, bytes) else b""


def read_header(stream: BufferedIOBase, ndim: int, limits: tuple[int, ...]) -> tuple[int, ...]:
    """The dimensions of an unsigned-byte idx file of `ndim` dimensions, each in 1..limits[i]."""
    expected_magic = UNSIGNED_BYTE << 8 | ndim
    header = _read(stream, 4 + 4 * ndim)
    if len(header) < 4 + 4 * ndim:
        raise IdxError(f"{len(header)} bytes, shorter than the idx header ({4 + 4 * ndim} bytes)")
    (magic,) = struct.unpack(">i", header[:4])
    if magic != expected_magic:
        kind = TYPE_NAMES.get(header[2], f"type 0x{header[2]:02x}")
        found = f"{kind}, {header[3]} dimensions" if header[:2] == b"\0\0" else "not an idx file"
        raise IdxError(f"magic number {magic}, {expected_magic} expected ({found}; unsigned byte, {ndim} "
                       f"dimension{'s' if ndim > 1 else ''} expected)")
    dims = struct.unpack(f">{ndim}i", header[4:])
    for axis, (size, limit) in enumerate(zip(dims, limits, strict=True)):
        if not 1 <= size <= limit:
            raise IdxError(f"dimension {axis} is {size}: 1 to {limit} expected ({' x '.join(map(str, dims))})")
    return dims


def read_data(stream: BufferedIOBase, dims: tuple[int, ...]) -> bytes:
    """The data after the header: exactly prod(dims) bytes, read as at most one byte more."""
    expected = 1
    for size in dims:
        expected *= size
    data = _read(stream, expected + 1)
    if len(data) != expected:
        found = f"{len(data)} data bytes" if len(data) < expected else "more data bytes (or trailing bytes)"
        raise IdxError(f"{found}, {' x '.join(map(str, dims))} = {expected} expected")
    return data
