"""New rows' vectors sent to PostgreSQL in pgvector's binary form, as one ``vector[]``
parameter of the insert (``repository_writes``).

As text, a vector padded to the stored 2560 dimensions (``retrieval.vector``) is ~16 kB of
digits and zeros per row, and formatting them was three quarters of the client's CPU in a
write of many rows (docs/BENCHMARKS.md, "Binary insert path"). In the binary form it is
4 bytes a float, laid out by numpy for all the rows at once.

A binary array names its element type by oid, and ``vector`` is an extension's type, whose
oid differs from one database to another (recent PostgreSQL releases check an element oid
only when both it and the expected one are built-in types; earlier ones refuse any other):
it is read once per database connection (``vector_oid``), through the same SQLAlchemy
connection as the insert, so that a failure there is the same SQLAlchemy exception as one
of the insert. The parameter itself is sent with no type (oid 0): the statement's
``cast(… AS vector[])`` names it; nothing here relies on a server-side prepared statement.

Only values of the ``VectorArray`` type are dumped by ``VectorArrayDumper``: how every other
statement sends and reads ``vector`` values (pgvector's SQLAlchemy type, as text) stays as
it is.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import numpy.typing as npt
from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format
from sqlalchemy import Connection, text

from memstrata.config import STORED_VECTOR_DIM
from memstrata.retrieval.vector import pad_vector

# Where a connection keeps the oid once read (SQLAlchemy's ``Connection.info``: one dict
# per database connection, emptied when the connection is replaced by a new one).
_OID_KEY = "memstrata.vector_oid"
# Rows whose floats are rounded to float4 at once: ``float4s`` makes a few arrays the size
# of its input, which for every row of a large write were several times the parameter.
_ROWS_AT_ONCE = 256


@dataclass(frozen=True)
class VectorArray:
    """A ``vector[]`` in PostgreSQL's binary form, ready to send as it is."""

    count: int
    data: bytes | bytearray = field(repr=False)  # megabytes: never in a log line or error


class VectorArrayDumper(Dumper):
    """Sends a ``VectorArray``'s bytes in the binary format with no type of its own."""

    format = Format.BINARY

    def dump(self, obj: VectorArray) -> Buffer | None:
        return obj.data


def vector_oid(connection: Connection) -> int:
    """The oid of the ``vector`` type as the statements on ``connection`` name it (its
    search path), read on the connection's first use only; ``VectorArray`` values can be
    sent on it from then on."""
    found = connection.info.get(_OID_KEY)
    if found is None:
        found = int(
            connection.execute(text("SELECT cast(cast('vector' AS regtype) AS oid)")).one()[0]
        )
        driver = connection.connection.driver_connection
        assert driver is not None
        driver.adapters.register_dumper(VectorArray, VectorArrayDumper)
        connection.info[_OID_KEY] = found
    return int(found)


def native_floats(v: Sequence[float], dim: int = STORED_VECTOR_DIM) -> npt.NDArray[np.float64]:
    """``v`` as float64s, if ``pad_vector`` takes it; else ``pad_vector``'s own error.

    numpy checks a whole vector at once (``pad_vector`` goes float by float); whatever it
    finds wrong, or cannot read, goes through ``pad_vector`` for the same exception as any
    write of a vector raised before."""
    try:
        arr: npt.NDArray[np.float64] | None = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        arr = None
    if arr is None or arr.ndim != 1 or not 0 < arr.size <= dim or not np.isfinite(arr).all():
        arr = np.asarray(pad_vector(v, dim)[: len(v)], dtype=np.float64)
    return arr


def vector_array(
    vectors: Sequence[npt.NDArray[np.float64]], oid: int, dim: int = STORED_VECTOR_DIM
) -> VectorArray:
    """A one-dimensional ``vector[]`` (``array_send``'s layout) of ``vectors``, each padded
    with zeros to ``dim`` (``pad_vector``'s stored vector): per element its byte length,
    then pgvector's ``vector_send`` — int16 dimensions, int16 zero, big-endian float4s."""
    if not vectors:  # no dimension at all, as array_send writes an empty array
        return VectorArray(0, struct.pack(">iiI", 0, 0, oid))
    element = np.dtype([("size", ">i4"), ("dim", ">u2"), ("unused", ">u2"), ("x", ">f4", (dim,))])
    # ndim 1, no NULL element, the element type; then the one dimension's size and base
    head = struct.pack(">iiIii", 1, 0, oid, len(vectors), 1)
    # The elements are laid out in the very buffer that is sent (zeros: the padding), not
    # built apart and joined to the head: 10 kB a row, each copy of 5,000 rows 51 MB more.
    data = bytearray(len(head) + len(vectors) * element.itemsize)
    data[: len(head)] = head
    items = np.frombuffer(data, dtype=element, offset=len(head))
    items["size"] = element.itemsize - 4
    items["dim"] = dim
    floats = items["x"]
    for first in range(0, len(vectors), _ROWS_AT_ONCE):
        group = vectors[first : first + _ROWS_AT_ONCE]
        values, start = float4s(np.concatenate(group)), 0
        for i, v in enumerate(group, first):
            floats[i, : v.size] = values[start : start + v.size]
            start += v.size
    return VectorArray(len(vectors), data)


def float4s(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """``x`` in float4 as PostgreSQL reads each float64's shortest decimal form (``repr``:
    how the write path sent vectors as text, and pgvector's Python type still does), so a
    vector is stored to the bit as it was.

    That is numpy's rounding but for a float64 exactly halfway between two float4s (rare,
    but the random vectors of a benchmark run met one): numpy rounds it to the even one,
    while its decimal form lies a little above or below and rounds to that side.
    A float64 beyond float4's range becomes infinite, which PostgreSQL refuses (a
    ``DataError``), as it refused the same number written as text."""
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    near = f.astype(np.float64)
    other = np.nextafter(f, np.where(x > near, np.float32(np.inf), np.float32(-np.inf)))
    for i in np.flatnonzero((near + other.astype(np.float64)) / 2 == x):
        exact = float(x[i])
        side = Decimal(repr(exact)) - Decimal(exact)
        if side:
            f[i] = max(f[i], other[i]) if side > 0 else min(f[i], other[i])
    return f
