"""``hstore`` values as Debezium's PostgreSQL connector writes them.

The connector parses the replication stream's text (``"k"=>"v", "n"=>NULL``) with the
JDBC driver's ``HStoreConverter.fromString`` into a ``java.util.HashMap``, then writes
it as that map (``hstore.handling.mode=map``) or as compact JSON text made with
Jackson (``json``, the default). Either way its entries come in the HashMap's
iteration order, which :func:`java_hashmap_order` reproduces: by bucket in the final
table, then by insertion within a bucket. A bucket that the map would turn into a
tree (nine keys or more whose hashes collide in the low bits of a table of 64 or
more) iterates in an order this module does not reproduce; such a value is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from processor.errors import UnsupportedTypeError

#: ``java.util.HashMap``'s first table and load factor, and where a bucket becomes a tree.
_FIRST_CAPACITY, _LOAD_FACTOR = 16, 0.75
_TREEIFY_AT, _MIN_TREE_CAPACITY = 8, 64


def parse(text: str) -> dict[str, str | None]:
    """An hstore's output text as its entries, in the order of the text."""
    out: dict[str, str | None] = {}
    pos, end = 0, len(text)
    while True:
        pos = text.find('"', pos)
        if pos < 0:
            return out
        key, pos = _quoted(text, pos)
        pos = text.index("=>", pos) + 2
        while pos < end and text[pos] == " ":
            pos += 1
        if text.startswith("NULL", pos):
            out[key], pos = None, pos + 4
        else:
            out[key], pos = _quoted(text, pos)


def _quoted(text: str, pos: int) -> tuple[str, int]:
    """The string quoted at ``text[pos]`` (backslash escapes any character), and the
    position after its closing quote."""
    chars = []
    pos += 1
    while text[pos] != '"':
        if text[pos] == "\\":
            pos += 1
        chars.append(text[pos])
        pos += 1
    return "".join(chars), pos + 1


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _spread(key: str) -> int:
    """``HashMap.hash``: the hash's high half folded into its low half (unsigned)."""
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (distinct) in the iteration order of a ``new HashMap<>()`` they were put
    into in this order."""
    keys = list(keys)
    hashes = [_spread(k) for k in keys]
    capacity, threshold = _FIRST_CAPACITY, int(_FIRST_CAPACITY * _LOAD_FACTOR)
    chains: Counter[int] = Counter()
    for size, h in enumerate(hashes, start=1):
        if chains[h & (capacity - 1)] >= _TREEIFY_AT:
            if capacity >= _MIN_TREE_CAPACITY:
                raise UnsupportedTypeError(
                    f"an hstore value has more than {_TREEIFY_AT} keys in one "
                    "java.util.HashMap bucket: the connector's order for them is not reproduced"
                )
            capacity, threshold = capacity * 2, threshold * 2  # HashMap resizes instead
            chains = Counter(other & (capacity - 1) for other in hashes[: size - 1])
        chains[h & (capacity - 1)] += 1
        if size > threshold:
            capacity, threshold = capacity * 2, threshold * 2
            chains = Counter(other & (capacity - 1) for other in hashes[:size])
    order = sorted(range(len(keys)), key=lambda i: (hashes[i] & (capacity - 1), i))
    return [keys[i] for i in order]


def _jackson_escapes() -> dict[int, str]:
    """How Jackson's default generator writes the characters it escapes in a string."""
    table = {c: f"\\u{c:04X}" for c in range(0x20)}
    table.update({ord("\b"): "\\b", ord("\t"): "\\t", ord("\n"): "\\n"})
    table.update({ord("\f"): "\\f", ord("\r"): "\\r", ord('"'): '\\"', ord("\\"): "\\\\"})
    return table


_ESCAPES = _jackson_escapes()


def _json_string(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


def as_map(text: str | None) -> dict[str, str | None] | None:
    """``hstore.handling.mode=map``: the entries in the connector's order."""
    if text is None:
        return None
    entries = parse(text)
    return {key: entries[key] for key in java_hashmap_order(entries)}


def as_json(text: str | None) -> str | None:
    """``hstore.handling.mode=json``: compact JSON text, entries in the connector's order."""
    entries = as_map(text)
    if entries is None:
        return None
    fields = (
        _json_string(k) + ":" + ("null" if v is None else _json_string(v))
        for k, v in entries.items()
    )
    return "{" + ",".join(fields) + "}"


def converter(mode: str) -> Callable[[Any], Any]:
    """The conversion of an hstore column's text under ``hstore.handling.mode``."""
    return as_json if mode == "json" else as_map
