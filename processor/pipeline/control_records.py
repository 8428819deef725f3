"""What a control record may say: each one is checked before any instance obeys it.

Write access to ``<pipeline>.control`` must not be operator access, and one bad record
must not stop the pipeline: the topic is compacted and read again in full at every
start, so a record that crashed its reader would crash every replica for good. So a
record under ``lifecycle`` must name a lifecycle state, and an ``offsets-write`` plan
may touch only what an offsets write of this pipeline touches: its data plane's
consumer group, the offsets of its input and backfill topics, the source positions of
its input topics, and the changelogs of its input topics (a forged plan could
otherwise tombstone any compacted topic, or move or delete any consumer group, with
the processor's credentials). What fails is refused with the reason
(:class:`ControlRecordError`); the reader logs and counts it and keeps what it had.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tidemark.core.topics import backfilled_topic, dataplane_group

#: The largest control record read; Tidemark's own plans of many partitions fit.
MAX_RECORD_BYTES = 8 << 20
#: The lifecycle states a record may name (``processor.pipeline.control_topic.Lifecycle``).
STATES = frozenset({"RUNNING", "PAUSED", "STOPPED"})
_MAX_PARTITION = (1 << 31) - 1
#: The longest writer id of an offsets-write plan.
MAX_WRITER = 100
_MAX_OFFSET = (1 << 63) - 1


#: The key of a table's removal mark, before its input topic's name.
REMOVING_PREFIX = b"removing:"


class ControlRecordError(ValueError):
    """A control record that is not one Tidemark writes: the reason."""


def lifecycle_record(value: bytes) -> dict[str, Any]:
    """The lifecycle record in ``value``: its ``state`` one of :data:`STATES` (and its time,
    if it has one, a time: a record without one is still obeyed, so that no stopped
    pipeline starts for want of it)."""
    record = _object(value)
    state = record.get("state")
    if state not in STATES:
        raise ControlRecordError(f"lifecycle state {str(state)[:40]!r} is none of {sorted(STATES)}")
    if "at_ms" in record:
        _check_at_ms(record)
    return record


def plan_record(value: bytes, pipeline: str, inputs: re.Pattern[str]) -> dict[str, Any]:
    """The offsets-write plan in ``value``, if it touches only ``pipeline``'s own group and
    topics (``inputs``: its input topics' pattern)."""
    record = _object(value)
    group = dataplane_group(pipeline)
    if record.get("group") != group:
        raise ControlRecordError(f"a plan for group {str(record.get('group'))[:80]!r}, not {group}")
    if not isinstance(record.get("delete_group"), bool):
        raise ControlRecordError("a plan whose delete_group is not true or false")
    changelog_head = f"{pipeline}.changelog."

    def owned(topic: object, kinds: tuple[str, ...]) -> bool:
        if not isinstance(topic, str):
            return False
        if "input" in kinds and inputs.match(topic):
            return True
        backfilled = backfilled_topic(pipeline, topic)
        if "backfill" in kinds and backfilled is not None and inputs.match(backfilled):
            return True
        changelog = topic[len(changelog_head) :] if topic.startswith(changelog_head) else ""
        return "changelog" in kinds and bool(changelog) and bool(inputs.match(changelog))

    for name, kinds, last in (
        ("offsets", ("input", "backfill"), "offset"),
        ("positions", ("input",), "position"),
        ("reset_state", ("changelog",), None),
    ):
        items = record.get(name)
        if not isinstance(items, list):
            raise ControlRecordError(f"a plan whose {name} is not a list")
        for item in items:
            size = 2 if last is None else 3
            if not isinstance(item, list) or len(item) != size:
                raise ControlRecordError(
                    f"a plan's {name} entry {str(item)[:80]} is not {size} items"
                )
            topic, partition = item[0], item[1]
            if not owned(topic, kinds):
                raise ControlRecordError(
                    f"a plan's {name} names {str(topic)[:120]!r}, not a {' or '.join(kinds)} "
                    f"topic of pipeline {pipeline!r}"
                )
            if not _integer(partition, _MAX_PARTITION):
                raise ControlRecordError(f"a plan's {name} names partition {str(partition)[:40]}")
            if last == "offset" and not _integer(item[2], _MAX_OFFSET):
                raise ControlRecordError(f"a plan's offset {str(item[2])[:40]} is not an offset")
            if last == "position" and item[2] is not None and not isinstance(item[2], dict):
                raise ControlRecordError("a plan's source position is not an object")
    writer = record.get("writer", "")
    if not isinstance(writer, str) or len(writer) > MAX_WRITER:
        raise ControlRecordError("a plan whose writer is not a short text")
    _check_at_ms(record)
    return record


def removal_record(value: bytes, key: bytes, inputs: re.Pattern[str]) -> dict[str, Any]:
    """The mark of a table being removed in ``value``: ``topic``, one of the pipeline's
    input topics (``inputs``), and the same as the one its ``key`` names."""
    record = _object(value)
    topic = record.get("topic")
    if not isinstance(topic, str) or not inputs.match(topic):
        raise ControlRecordError(f"a removal of {str(topic)[:80]!r}, not an input topic")
    if key != REMOVING_PREFIX + topic.encode():
        raise ControlRecordError("a removal whose key names another topic")
    _check_at_ms(record)
    return record


def checked_time(header: object) -> int:
    """The time in ms a record's ``tidemark.at`` header gives."""
    if not isinstance(header, bytes) or not header.isdigit() or len(header) > 18:
        raise ControlRecordError("no tidemark.at header with the time it was written")
    return int(header)


def _object(value: bytes) -> dict[str, Any]:
    if len(value) > MAX_RECORD_BYTES:
        raise ControlRecordError(f"{len(value)} bytes, above {MAX_RECORD_BYTES}")
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ControlRecordError(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ControlRecordError("not a JSON object")
    return record


def _check_at_ms(record: dict[str, Any]) -> None:
    if not _integer(record.get("at_ms"), _MAX_OFFSET):
        raise ControlRecordError("at_ms, when the record was written, is not a time in ms")


def _integer(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most
