"""Plain data between the tests and the program: a strict, code-free encoding and pipe framing.

The program and its tests run in different processes (:mod:`.remote`); every value that crosses
between them is encoded here. A value is *plain data* or a *reference*:

* plain: ``None``, ``bool``, ``int`` (beyond 64 bits as ``["h", hex]``), ``float``, ``str`` (as
  JSON) and tagged JSON arrays for
  ``list`` ``["l", items]``, ``tuple`` ``["t", items]``, ``set`` ``["s", items]``, ``frozenset``
  ``["f", items]``, ``dict`` ``["d", [[key, value], ...]]``, ``bytes`` ``["b", hex]``, ``bytearray``
  ``["y", hex]``, ``complex`` ``["c", real, imag]``, ``fractions.Fraction`` ``["q", num, den]`` and
  ``decimal.Decimal`` ``["e", text]``. Subclasses are sent as their base type (a ``namedtuple`` as a
  tuple, a ``Counter`` as a dict), numpy scalars as the Python number they hold;
* a reference ``["r", id, type name]``: any other object (a class instance, a function, a
  generator, a numpy array); it stays in the program's process, and the tests can only call it,
  iterate it and read its attributes, items and length (see :class:`.remote.Remote`).

Decoding accepts exactly these forms and nothing else, so whatever the program sends, the tests
get plain Python values: no object of the program's making (no custom ``__eq__``) ever reaches the
process that decides the verdict. Framing: a 4-byte big-endian length, then the UTF-8 JSON text;
messages over :data:`MAX_MESSAGE` bytes are refused. Standard library only (the sandbox runner loads
it by file path).
"""

from __future__ import annotations

import decimal
import fractions
import json
import os
import struct

__all__ = ["MAX_MESSAGE", "MAX_DEPTH", "WireError", "encode", "decode", "send", "receive"]

MAX_MESSAGE = 64 * 1024 * 1024
MAX_DEPTH = 200
_SMALL = 2**63
_SEQUENCES = {"l": list, "t": tuple, "s": set, "f": frozenset}


class WireError(Exception):
    """A message that is not well-formed (too large, truncated, or not one of the accepted forms)."""


def _numpy_scalar(x):
    """The Python number held by a numpy scalar, else None (numpy is never imported here)."""
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0 and hasattr(x, "item"):
        value = x.item()
        if type(value) in (bool, int, float, complex, str, bytes):
            return value
    return None


def _int(x: int):
    """Small integers as JSON numbers; large ones as hex text (linear time both ways, where decimal
    conversion is quadratic: a factorial of a few thousand digits would take seconds)."""
    return x if -_SMALL <= x < _SMALL else ["h", format(x, "x")]


def encode(x, refer, depth: int = 0):
    """``x`` as JSON-ready plain data; ``refer(obj)`` returns the reference id of anything else."""
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        return _int(x)
    if depth > MAX_DEPTH:
        return ["r", refer(x), t.__name__]
    d = depth + 1
    if isinstance(x, bool):  # unreachable (bool cannot be subclassed), kept for clarity
        return bool(x)
    if isinstance(x, int):
        return _int(int(x))
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, (list, tuple, set, frozenset)):
        tag = "t" if isinstance(x, tuple) else "f" if isinstance(x, frozenset) else "s" if isinstance(x, set) else "l"
        return [tag, [encode(i, refer, d) for i in x]]
    if isinstance(x, dict):
        return ["d", [[encode(k, refer, d), encode(v, refer, d)] for k, v in x.items()]]
    if isinstance(x, bytes):
        return ["b", bytes(x).hex()]
    if isinstance(x, bytearray):
        return ["y", bytes(x).hex()]
    if isinstance(x, complex):
        return ["c", x.real, x.imag]
    if isinstance(x, fractions.Fraction):
        return ["q", x.numerator, x.denominator]
    if isinstance(x, decimal.Decimal):
        return ["e", str(x)]
    scalar = _numpy_scalar(x)
    if scalar is not None:
        return encode(scalar, refer, d)
    return ["r", refer(x), t.__name__[:100]]


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise WireError(f"malformed value: {what}")


def decode(v, resolve, depth: int = 0):
    """The value encoded as ``v``; ``resolve(id, type name)`` turns a reference into an object.

    :raises WireError: ``v`` is not one of the forms listed in the module docstring.
    """
    t = type(v)
    if v is None or t is bool or t is str or t is int or t is float:
        return v
    _need(t is list and len(v) >= 2 and type(v[0]) is str, "expected a tagged array")
    _need(depth <= MAX_DEPTH + 1, "nested too deeply")
    tag, d = v[0], depth + 1
    if tag in _SEQUENCES:
        _need(len(v) == 2 and type(v[1]) is list, f"{tag!r} needs a list")
        items = [decode(i, resolve, d) for i in v[1]]
        try:
            return _SEQUENCES[tag](items)
        except TypeError as exc:  # unhashable set member
            raise WireError(f"malformed value: {exc}") from None
    if tag == "d":
        _need(len(v) == 2 and type(v[1]) is list, "'d' needs a list of pairs")
        out = {}
        for pair in v[1]:
            _need(type(pair) is list and len(pair) == 2, "'d' needs [key, value] pairs")
            try:
                out[decode(pair[0], resolve, d)] = decode(pair[1], resolve, d)
            except TypeError as exc:  # unhashable key
                raise WireError(f"malformed value: {exc}") from None
        return out
    if tag in ("b", "y"):
        _need(len(v) == 2 and type(v[1]) is str, "bytes need hex text")
        try:
            raw = bytes.fromhex(v[1])
        except ValueError:
            raise WireError("malformed value: bad hex") from None
        return raw if tag == "b" else bytearray(raw)
    if tag == "c":
        _need(len(v) == 3 and all(type(p) in (int, float) for p in v[1:]), "'c' needs two numbers")
        return complex(v[1], v[2])
    if tag == "q":
        _need(len(v) == 3 and type(v[1]) is int and type(v[2]) is int and v[2] > 0, "'q' needs two integers")
        return fractions.Fraction(v[1], v[2])
    if tag == "e":
        _need(len(v) == 2 and type(v[1]) is str and len(v[1]) < 10_000, "'e' needs decimal text")
        try:
            return decimal.Decimal(v[1])
        except decimal.InvalidOperation:
            raise WireError("malformed value: bad decimal") from None
    if tag == "h":
        _need(len(v) == 2 and type(v[1]) is str and len(v[1]) < 2**26, "'h' needs hex text")
        try:
            return int(v[1], 16)
        except ValueError:
            raise WireError("malformed value: bad hex integer") from None
    if tag == "r":
        _need(len(v) == 3 and type(v[1]) is int and type(v[2]) is str, "'r' needs an id and a type name")
        return resolve(v[1], v[2][:100])
    raise WireError(f"malformed value: unknown tag {tag[:20]!r}")


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(fd: int, message) -> None:
    """Write one framed JSON message. :raises WireError: it is larger than :data:`MAX_MESSAGE`."""
    data = json.dumps(message, separators=(",", ":")).encode("utf-8", "surrogatepass")
    if len(data) > MAX_MESSAGE:
        raise WireError(f"message of {len(data)} bytes is over the {MAX_MESSAGE}-byte limit")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def receive(fd: int):
    """Read one framed JSON message; None at end of file.

    :raises WireError: a truncated, oversized or non-JSON message.
    """
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE}-byte limit")
    body = _read_exact(fd, size)
    if body is None:
        raise WireError("truncated message")
    try:
        return json.loads(body.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        raise WireError("message is not JSON") from None

