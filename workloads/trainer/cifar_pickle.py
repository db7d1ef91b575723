"""The one way the trainer reads a pickle from the data volume: CIFAR-10's "python version" batches as
Python 2's cPickle wrote them and as Python 3 re-saves them (protocols 2 to 5), without numpy and
without running anything the file names.

A pickle is a program: every global it names is called with arguments it chooses. `load` resolves
exactly the globals a numpy integer array needs onto stand-ins that check their arguments and only
ever hold bytes, and refuses every other global (os.system, eval, any other numpy function):

- `numpy.core.multiarray._reconstruct` / `numpy._core.multiarray._reconstruct` (numpy 1 / 2) with
  `numpy.ndarray` and the state (version, shape, dtype, fortran, raw bytes): protocols 2 to 4;
- `numpy.core.numeric._frombuffer` / `numpy._core.numeric._frombuffer` (numpy 1 / 2) with in-band bytes,
  a dtype, a shape and order "C" or "F": protocol 5;
- `numpy.dtype` of a plain integer type ("u1" for pixels, up to "i8" for labels);
- `_codecs.encode(text, "latin1")`: how protocol 2 writes a Python 3 bytes object.

An array's declared shape times its item size must equal the bytes present, so nothing is sized from
a number in the file. It runs pickle's pure-Python unpickler with an opcode budget, not the C one:
the C unpickler sizes its memo from an index the file gives (a 12-byte pickle makes it allocate and
clear 770 MB), while here the memo is a dict and every opcode counts, so memory stays bounded by
the file's size.
"""

from __future__ import annotations

import io
import pickle
import reprlib
import struct
from collections.abc import Callable
from typing import Any

# numpy's pickled type codes of the plain integer types and their struct formats (labels may be any).
INTEGER_FORMATS = {"u1": "B", "i1": "b", "u2": "H", "i2": "h", "u4": "I", "i4": "i", "u8": "Q", "i8": "q"}
MAX_DIMENSIONS = 8
# A CIFAR-10 batch takes about 40,000 opcodes (10,000 labels and 10,000 file names); each opcode
# creates at most one small object besides the bytes the file itself holds.
MAX_OPCODES = 250_000


class PickleRefused(pickle.UnpicklingError):
    """The file asks for something a CIFAR-10 batch never needs (nothing of it was run)."""


class Dtype:
    """numpy.dtype(code, align, copy) of a plain integer type, with its pickled byte order."""

    def __init__(self, code: Any, align: Any = False, copy: Any = True) -> None:
        code = code.decode("ascii", "replace") if isinstance(code, bytes) else code  # Python 2 files: bytes
        if not isinstance(code, str) or code not in INTEGER_FORMATS:
            raise PickleRefused(f"numpy dtype {_short(code)}: only plain integer types ({', '.join(INTEGER_FORMATS)})")
        if align not in (False, 0) or copy not in (True, 1):
            raise PickleRefused(f"numpy dtype {code!r} with align={_short(align)}, copy={_short(copy)}")
        self.code, self.itemsize = code, int(code[1])
        self.byteorder = "<"

    def __setstate__(self, state: Any) -> None:
        # (version 3 or 4, byte order, subarray, names, fields, elsize, alignment, flags[, metadata])
        if not isinstance(state, tuple) or len(state) not in (8, 9) or state[0] not in (3, 4):
            raise PickleRefused(f"numpy dtype {self.code}: state {_short(state)} is not numpy's")
        order = state[1].decode("ascii", "replace") if isinstance(state[1], bytes) else state[1]
        if order not in ("<", ">", "|", "="):
            raise PickleRefused(f"numpy dtype {self.code}: byte order {_short(order)}")
        if any(part is not None for part in state[2:5]) or (len(state) == 9 and state[8] is not None):
            raise PickleRefused(f"numpy dtype {self.code}: a structured, subarray or annotated dtype")
        self.byteorder = ">" if order == ">" else "<"  # "|": one byte; "=": this (little-endian) machine


class Array:
    """A numpy array as the file holds it: shape, dtype, order and exactly as many bytes as declared."""

    def __init__(self) -> None:
        self.shape: tuple[int, ...] | None = None
        self.dtype: Dtype | None = None
        self.fortran = False
        self.raw = b""

    def fill(self, shape: Any, dtype: Any, fortran: Any, raw: Any) -> None:
        if self.shape is not None:
            raise PickleRefused("an array's data is set twice")
        if (not isinstance(shape, tuple) or len(shape) > MAX_DIMENSIONS
                or not all(type(d) is int and d >= 0 for d in shape)):
            raise PickleRefused(f"array shape {_short(shape)}: a tuple of up to {MAX_DIMENSIONS} sizes >= 0 expected")
        if not isinstance(dtype, Dtype):
            raise PickleRefused(f"array dtype {_short(dtype)} is not a numpy dtype")
        if fortran not in (True, False):
            raise PickleRefused(f"array order flag {_short(fortran)}")
        if not isinstance(raw, (bytes, bytearray)):  # an int here would make bytes(n) allocate n zeros
            raise PickleRefused(f"array data is a {type(raw).__name__}, bytes expected")
        expected = dtype.itemsize
        for d in shape:
            expected *= d
        if len(raw) != expected:
            dims = " x ".join(map(str, shape)) or "scalar"
            raise PickleRefused(f"array {dims} of {dtype.code} needs {expected} bytes but holds {len(raw)} bytes")
        self.shape, self.dtype, self.fortran, self.raw = shape, dtype, bool(fortran), bytes(raw)

    def __setstate__(self, state: Any) -> None:
        # ndarray.__reduce__: (version 1, shape, dtype, is_fortran, raw); numpy also reads it without the version
        if not isinstance(state, tuple) or len(state) not in (4, 5) or (len(state) == 5 and state[0] != 1):
            raise PickleRefused(f"array state {_short(state)} is not numpy's")
        self.fill(*state[-4:])

    def integers(self) -> tuple[int, ...]:
        """The values of a 1-D integer array, in its byte order."""
        assert self.dtype is not None and self.shape is not None and len(self.shape) == 1
        return struct.unpack(f"{self.dtype.byteorder}{self.shape[0]}{INTEGER_FORMATS[self.dtype.code]}", self.raw)


class _Global:
    """What a global in the file resolves to: a callable that checks its arguments. Nothing in the
    file can alter it (BUILD on it is refused: it would set attributes for every later load)."""

    __slots__ = ("name", "call")

    def __init__(self, name: str, call: Callable[..., Any]) -> None:
        self.name, self.call = name, call

    def __call__(self, *args: Any) -> Any:
        return self.call(*args)

    def __setstate__(self, state: Any) -> None:
        raise PickleRefused(f"{self.name} cannot be modified")


def _refuse_call(*args: Any) -> Any:
    raise PickleRefused("numpy.ndarray is only an argument of _reconstruct")


NDARRAY = _Global("numpy.ndarray", _refuse_call)


def _reconstruct(subtype: Any, shape: Any, typecode: Any) -> Array:
    # ndarray.__reduce__ (protocols 2-4): _reconstruct(ndarray, (0,), b"b"), then BUILD with the state
    if subtype is not NDARRAY or shape != (0,) or typecode not in (b"b", "b"):
        raise PickleRefused(f"_reconstruct{_short((subtype, shape, typecode))}: only _reconstruct(ndarray, (0,), b'b')")
    return Array()


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> Array:
    # protocol 5: numpy's _frombuffer(buf, dtype, shape, order), the data in-band (bytes or bytearray)
    if order not in ("C", "F"):
        raise PickleRefused(f"_frombuffer order {_short(order)}: 'C' or 'F' expected")
    array = Array()
    array.fill(shape, dtype, order == "F", buffer)
    return array


def _latin1_encode(text: Any, encoding: Any) -> bytes:
    # protocol 2 has no bytes opcode: pickle writes bytes as _codecs.encode(str(b, "latin1"), "latin1")
    if not isinstance(text, str) or encoding != "latin1":
        raise PickleRefused(f"_codecs.encode{_short((text, encoding))}: only a str to 'latin1'")
    return text.encode("latin1")


_RECONSTRUCT = _Global("numpy _reconstruct", _reconstruct)
_FROMBUFFER = _Global("numpy _frombuffer", _frombuffer)
GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 1
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 2
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy", "ndarray"): NDARRAY,
    ("numpy", "dtype"): _Global("numpy.dtype", Dtype),
    ("_codecs", "encode"): _Global("_codecs.encode", _latin1_encode),
}


class _Dispatch(dict):
    def __missing__(self, key: int) -> Any:
        raise pickle.UnpicklingError(f"invalid pickle opcode 0x{key:02x}")


class _CifarUnpickler(pickle._Unpickler):
    def __init__(self, stream: io.BytesIO, max_opcodes: int) -> None:
        super().__init__(stream, encoding="bytes")
        budget = [max_opcodes]

        def counted(run: Callable[[Any], None]) -> Callable[[Any], None]:
            def step(unpickler: Any) -> None:
                budget[0] -= 1
                if budget[0] < 0:
                    raise PickleRefused(f"more than {max_opcodes} pickle opcodes")
                run(unpickler)
            return step

        self.dispatch = _Dispatch({code: counted(run) for code, run in pickle._Unpickler.dispatch.items()})  # type: ignore[misc]

    def find_class(self, module: str, name: str) -> Any:
        try:
            return GLOBALS[(module, name)]
        except KeyError:
            raise PickleRefused(f"global {module}.{name} is not part of a CIFAR-10 batch") from None

    def persistent_load(self, pid: Any) -> Any:
        raise PickleRefused("persistent references are not part of a CIFAR-10 batch")


def load(data: bytes, max_opcodes: int = MAX_OPCODES) -> Any:
    """The object `data` pickles, read as above; PickleRefused or another exception when it is not one."""
    stream = io.BytesIO(data)
    try:
        value = _CifarUnpickler(stream, max_opcodes).load()
    except PickleRefused:
        raise
    except Exception as exc:  # pickle's pure-Python reader meets a short read as IndexError, struct.error...
        if stream.tell() < len(data):
            raise
        raise pickle.UnpicklingError("truncated: the data ends before the pickle does") from exc
    if stream.tell() != len(data):
        raise PickleRefused(f"{len(data) - stream.tell()} bytes after the pickle's end")
    return value


def _short(value: Any) -> str:
    return reprlib.repr(value)  # bounded: a refused argument may be a 60 MB string
