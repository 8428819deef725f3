"""Kafka Connect values, and how a chunk row's column becomes one.

Debezium's connectors turn every column into a *Connect value* (``int``,
``float``, ``bool``, ``str``, ``bytes``, ``Decimal``, a :class:`VariableScale`, a
list for an array or a dict for a map); the converter then writes it. A :class:`Column`,
made by the database's connector from its catalog type, says how the chunk
query reads the column and how its value becomes a Connect value.
:func:`to_json` gives the JSON converter's form (bytes and decimals as
base64); Avro takes Connect values as they are, but for :func:`to_avro`.
"""

from __future__ import annotations

import binascii
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Column:
    """One column: how to select it and how to convert its value."""

    name: str
    type_name: str
    #: How the chunk query reads the column: ``text`` (the type's own output text, as
    #: the replication stream carries it), ``numeric`` (a cast), or ``None`` (as it is).
    cast: str | None
    convert: Callable[[Any], Any]
    #: The JSON converter's form of the query's value; ``None``: the value is its own.
    json: Callable[[Any], Any] | None = None
    #: The Connect schema Debezium declares for the column, ``(type, logical name)``, where
    #: a connector setting decides it (``setting``); checked against the topic's events.
    schema: tuple[str, str | None] | None = None
    setting: str | None = None
    #: A fixed-scale decimal's precision and scale as Debezium declares them (Connect's
    #: parameters, as text; money has no precision).
    decimal: tuple[str | None, str | None] | None = None


class VariableScale(NamedTuple):
    """Debezium's ``VariableScaleDecimal`` struct: an unscaled integer and its scale."""

    scale: int
    value: int


def same(value: Any) -> Any:
    """The value as it is (the conversion of types whose value is already Connect's)."""
    return value


def to_json(value: Any) -> Any:
    """A Connect value in the JSON converter's form: bytes and decimals as base64."""
    if isinstance(value, bytes):
        return base64_text(value)
    if isinstance(value, decimal.Decimal):
        sign, digits, _exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return base64_text(twos_complement(unscaled))
    if isinstance(value, VariableScale):
        return {"scale": value.scale, "value": base64_text(twos_complement(value.value))}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def to_avro(value: Any) -> Any:
    """A Connect value as fastavro writes it (a variable-scale decimal's value as bytes)."""
    if isinstance(value, VariableScale):
        return {"scale": value.scale, "value": twos_complement(value.value)}
    return value


def base64_text(data: bytes) -> str:
    """Bytes as the JSON converter writes them: base64 text."""
    return binascii.b2a_base64(data, newline=False).decode()


def twos_complement(number: int) -> bytes:
    """Java's ``BigInteger.toByteArray()``: big-endian, the fewest bytes that keep the sign."""
    length = (number + (number < 0)).bit_length() // 8 + 1
    return number.to_bytes(length, "big", signed=True)
