"""The compiled header writers and readers (nnlo.transport's fast path for shapes already seen) against the
general rules they replace (``_encode`` / ``_decode``): the same bytes, the same refusals, the same headers,
for any shape, any value (hypothesis). Pure: no MPI job."""
from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlo import transport
from nnlo.transport import COMPACT_FIELDS, HEADER_BYTES, HEADER_WORDS, WORDS

_INT_LIMIT = 2 ** 53


def _values(kind: type) -> st.SearchStrategy[Any]:
    """Values that fit ``kind`` and values that do not (the writer must refuse those exactly as _encode)."""
    fitting: dict[type, st.SearchStrategy[Any]] = {
        float: st.floats(allow_nan=True, allow_infinity=True) | st.floats(width=64).map(np.float64),
        int: st.integers(-_INT_LIMIT - 2, _INT_LIMIT + 2) | st.sampled_from([0, 1, -1, 2 ** 53 - 1, 2 ** 53]),
        bool: st.booleans(),
        str: st.sampled_from(WORDS) | st.text(max_size=8),
    }
    wrong = st.sampled_from([1, 1.5, True, "update", np.int64(3), np.float32(1.0), b"x", [1]])
    return st.one_of(st.none(), fitting[kind], wrong)


@st.composite
def headers(draw: st.DrawFn, schema_only: bool = True) -> dict[str, Any]:
    fields = draw(st.permutations(COMPACT_FIELDS))
    header = {key: draw(_values(kind)) for key, kind in fields[:draw(st.integers(0, len(fields)))]}
    if not schema_only and draw(st.booleans()):
        header["checkpoint"] = "/tmp/x"
    return header


def _reference(header: dict[str, Any], fused: bool) -> bytes | None:
    """The bytes the general rules give (``_encode`` and the full block struct), or None: pickled."""
    values = transport._encode(header)
    if values is None:
        return None
    present, nones, fields = values
    flags = 1 if fused else 0
    return struct.pack(f"<4Q{len(COMPACT_FIELDS)}d", transport._MAGIC, present, nones, flags, *fields)


def _packed(header: dict[str, Any], fused: bool) -> bytes | None:
    block = np.full(HEADER_WORDS, np.nan)  # what an earlier message left must not leak through
    before = block.tobytes()
    if not transport.pack_header(header, block, fused):
        assert block.tobytes() == before, "a refused header must leave the block untouched"
        return None
    return block.tobytes()


_SAME_TYPE: dict[type, st.SearchStrategy[Any]] = {  # another value of the type a shape was seen with
    int: st.integers(-_INT_LIMIT - 2, _INT_LIMIT + 2) | st.sampled_from([2 ** 53, -(2 ** 53), 2 ** 53 - 1]),
    str: st.sampled_from(WORDS) | st.text(max_size=8),
    float: st.floats(),
    bool: st.booleans(),
}


@settings(max_examples=400, deadline=None)
@given(headers(schema_only=False), st.booleans(), st.data())
def test_writer_packs_the_bytes_the_general_rules_give(first: dict[str, Any], fused: bool, data: Any) -> None:
    transport._WRITERS.clear()
    assert _packed(first, fused) == _reference(first, fused)  # a new shape: the general rules
    assert _packed(first, fused) == _reference(first, fused)  # the same shape again: its writer, if it has one
    # the same shape (keys, order, types) with other values: a word outside WORDS, an integer past 2**53
    # must be refused by the writer as by the general rules
    for _ in range(3):
        other = {k: data.draw(_SAME_TYPE[type(v)]) if type(v) in _SAME_TYPE else v for k, v in first.items()}
        assert _packed(other, fused) == _reference(other, fused)


@st.composite
def blocks(draw: st.DrawFn) -> bytes:
    present = draw(st.integers(0, 2 ** 16 - 1))  # bits past the schema are ignored by both
    nones = draw(st.integers(0, 2 ** 16 - 1))
    values = []
    for _, kind in COMPACT_FIELDS:
        if kind is str:
            values.append(float(draw(st.integers(0, len(WORDS) - 1))))
        elif kind in (int, bool):
            values.append(float(draw(st.integers(-_INT_LIMIT + 1, _INT_LIMIT - 1))))
        else:
            values.append(draw(st.floats(allow_nan=True, allow_infinity=True)))
    flags = draw(st.integers(0, 3))
    return struct.pack(f"<4Q{len(COMPACT_FIELDS)}d", transport._MAGIC, present, nones, flags, *values)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if list(a) != list(b):  # the same keys in the same order
        return False
    for x, y in zip(a.values(), b.values(), strict=True):
        if type(x) is not type(y):
            return False
        if isinstance(x, float) and (math.isnan(x) or math.isnan(y)):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif x != y or (isinstance(x, float) and math.copysign(1, x) != math.copysign(1, y)):
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(blocks())
def test_reader_gives_the_header_the_general_rules_give(raw: bytes) -> None:
    transport._READERS.clear()
    block = np.frombuffer(raw, dtype=np.float64).copy()
    assert block.nbytes == HEADER_BYTES
    words = struct.unpack(f"<4Q{len(COMPACT_FIELDS)}d", raw)
    expected = transport._decode(words[1], words[2], words[4:])
    first, fused = transport.unpack_header(block)  # masks not seen yet: the general rules
    again, fused_again = transport.unpack_header(block)  # seen: their reader
    assert _same(first, expected) and _same(again, expected), (expected, first, again)
    assert fused == fused_again == bool(words[3] & 1)
    assert again is not first  # a fresh dict each time: callers may change the header they get


def test_caches_stay_bounded() -> None:
    transport._READERS.clear()
    for present in range(3 * transport._PLANS_MAX):
        transport._read((transport._MAGIC, present, 0, 0, *[0.0] * len(COMPACT_FIELDS)))
        assert len(transport._READERS) <= transport._PLANS_MAX
