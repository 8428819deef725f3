"""Removing a table from a pipeline (``tidemark tables remove``).

A table that leaves the source (dropped, or no longer captured) leaves behind its
change topic, the topics Tidemark made for it (changelog, backfill, output), a source
position per partition, and, on each instance that held its partitions, a range of
state. The command writes a tombstone over each position, then deletes the topics,
those the data plane reads first (the group's committed offsets go with their topic).

The pipeline runs on meanwhile. librdkafka 2.16 crashes a consumer that holds a
partition of a topic deleted under it (seen against the embedded broker), so the
command first marks the table in the control topic (``removing:<input topic>``): every
instance leaves its topics out of its subscription, gives up their partitions (and
deletes their state), and says so in its report (:mod:`processor.dataplane.removals`).
Once every running instance has, the command deletes the topics and, once the broker
no longer lists them, takes the mark back. An instance that was away meanwhile
deletes, when it starts, the state it keeps of topics the broker no longer has; and a
store recorded for an earlier incarnation of its topics (the table added again
meanwhile) is wiped before the new topics' records meet it
(:func:`state.store.from_other_topics`).

The change topic is Debezium's: a consumer other than this pipeline that reads it
loses it too. It refuses a table the source still has and Debezium still captures:
Debezium would make its change topic again at the next change, and the data plane
would take it up. ``--force`` removes it anyway (the table's next change starts it
again from nothing). It refuses too, ``--force`` or not, while a backfill of the table
is unfinished (:func:`backfill_reason`). The output topic is kept unless asked for:
the sink's Iceberg table and other readers depend on it (stop them first: they hold
its partitions).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from processor.pipeline.control_records import REMOVING_PREFIX
from processor.pipeline.control_topic import read_control, write_control
from processor.pipeline.instances import REPORT_EVERY_S, read_instances
from processor.pipeline.offsets import write_positions
from processor.snapshot.client import read_state
from processor.snapshot.progress import DELIVERING, UNFINISHED, SnapshotState
from processor.snapshot.signals import TABLE_PATTERN
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka import (
    absent_topics,
    client_config,
    partition_counts,
)
from tidemark.core.topics import (
    backfill_topic,
    change_topic,
    changelog_topic,
    output_topic,
    positions_topic,
)

log = logging.getLogger(__name__)

#: How long the command waits for the instances to release the table's partitions.
WAIT_S = 120.0


@dataclass
class Removal:
    """What removing a table deletes: its topics, each with its partition count."""

    table: str
    input: str
    #: The table's topics that exist, in the order they are deleted.
    topics: dict[str, int] = field(default_factory=dict)
    #: Input partitions whose source position gets a tombstone.
    positions: int = 0

    def summary(self) -> dict[str, object]:
        return {"table": self.table, "deleted_topics": list(self.topics)}


def table_topics(config: Config, table: str) -> tuple[list[str], list[str]]:
    """``table``'s topics that the data plane reads (its change topic, its backfill
    topic), and those it made from them (changelog, output)."""
    pipeline, prefix = config.processor.pipeline, config.source.topic_prefix
    source = change_topic(prefix, table)
    read = [source, backfill_topic(pipeline, source)]
    return read, [changelog_topic(pipeline, source), output_topic(prefix, source)]


def plan_removal(
    config: Config, table: str, existing: dict[str, int], *, with_output: bool
) -> Removal:
    """The topics of ``table`` to delete among ``existing`` (name to partitions), those
    the data plane reads first; the output only ``with_output``."""
    read, made = table_topics(config, table)
    if not with_output:
        made = made[:1]
    topics = {n: existing[n] for n in read + made if n in existing}
    # Counted by any of its topics: a run again after a crash may find the input gone.
    return Removal(table, read[0], topics, max(topics.values(), default=0))


def captured_reason(config: Config, table: str) -> str | None:
    """Why ``table`` cannot be removed now (the source has it and Debezium captures it),
    or ``None``."""
    listed = config.source.tables
    if listed and table not in listed:
        return None  # outside Debezium's table.include.list
    schema, name = table.split(".", 1)
    try:
        with psycopg.connect(**config.source.conninfo(), connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s",
                (schema, name),
            ).fetchone()
    except psycopg.Error as exc:
        raise TidemarkError(
            f"cannot ask the source whether {table} still exists: {exc}; nothing was "
            "removed (--force removes it without asking)"
        ) from None
    if row is None:
        return None
    return (
        f"{table} still exists in the source and Debezium captures it: its next change "
        "would make its topic again. Drop it, or leave it out of Debezium's "
        "table.include.list (source.tables), first; --force removes it anyway"
    )


def backfill_reason(state: SnapshotState | None, table: str) -> str | None:
    """Why ``table`` cannot be removed now (a backfill of it is not done: deleting its
    backfill topic would leave it unfinished for good), with what to do, or ``None``."""
    for t in state.tables if state is not None else ():
        if t.table != table or t.status not in UNFINISHED:
            continue
        doing = f"a backfill of {table} is {t.status} (request {t.request_id})"
        if t.status == DELIVERING:
            return f"{doing}: it is read, and completes once the data plane has passed its rows"
        if t.keys is not None:  # a stop signal does not stop these
            return f"{doing}: the data plane's own read of keys again; let it finish"
        return f"{doing}: let it finish, or stop it (tidemark snapshot stop {table}), first"
    return None


def remove_table(
    config: Config,
    table: str,
    *,
    with_output: bool = False,
    force: bool = False,
    wait_s: float = WAIT_S,
) -> Removal:
    """Delete ``table``'s topics and positions once no instance holds them (see the
    module's text)."""
    source = input_of(config, table)
    if not force and (reason := captured_reason(config, table)) is not None:
        raise TidemarkError(reason)
    if (reason := backfill_reason(read_state(config), table)) is not None:
        raise TidemarkError(reason)
    mark = REMOVING_PREFIX + source.encode()
    write_control(config, mark, {"topic": source, "by": "cli"})
    _wait_released(config, source, wait_s)
    if source not in read_control(config).removing:
        raise TidemarkError(
            f"the removal of {table} was taken back meanwhile (--cancel): nothing was deleted"
        )
    if (reason := backfill_reason(read_state(config), table)) is not None:
        raise TidemarkError(  # requested while the instances let go
            f"{reason}. Nothing was deleted, and the instances keep leaving the table out, "
            "so its rows are not read meanwhile: take the removal back with --cancel until "
            "it is done (a backfill stopped instead lets you run the command again now)"
        )
    admin = AdminClient(client_config(config.kafka))
    read, made = table_topics(config, table)
    existing = partition_counts(admin, [*read, *made, positions_topic(config.processor.pipeline)])
    removal = plan_removal(config, table, existing, with_output=with_output)
    # Positions first: a run again after a crash further on still finds a topic to count
    # them by, and no instance writes them once it let go.
    if positions_topic(config.processor.pipeline) in existing:
        write_positions(config, admin, [(removal.input, p, None) for p in range(removal.positions)])
    # The topics read first: nothing new reaches the topics made from them after.
    _delete(admin, [t for t in removal.topics if t in read])
    _delete(admin, [t for t in removal.topics if t not in read])
    _wait_gone(admin, list(removal.topics))
    write_control(config, mark, None)
    log.info("removed %s: %s", table, ", ".join(removal.topics) or "no topic left")
    return removal


def cancel_removal(config: Config, table: str) -> None:
    """Take back the mark of ``table``'s removal: the instances read its topics again (a
    removal that did not finish, or deleted them already: they are made again as new)."""
    write_control(config, REMOVING_PREFIX + input_of(config, table).encode(), None)


def input_of(config: Config, table: str) -> str:
    """``table``'s change topic, if it is one of the pipeline's inputs."""
    if not re.match(TABLE_PATTERN, table):
        raise TidemarkError(f"{table!r} is not a table name (schema.table)")
    source = change_topic(config.source.topic_prefix, table)
    if not re.match(config.input_pattern(), source):
        raise TidemarkError(
            f"{source} is not an input topic of pipeline {config.processor.pipeline!r} "
            "(processor.input_pattern): nothing was done"
        )
    return source


def released(report: dict[str, Any], source: str, topics: set[str]) -> bool:
    """Whether an instance's report (:mod:`processor.pipeline.instances`) says it read the
    mark of ``source``'s removal and holds none of ``topics``' partitions. Once every
    instance read it, none subscribes to the topics, so no rebalance gives them back."""
    let_go = report.get("released_for_removal")
    if not isinstance(let_go, list) or source not in let_go:
        return False
    return not any(
        isinstance(tp, dict) and tp.get("topic") in topics for tp in report["assigned_partitions"]
    )


def _wait_released(config: Config, source: str, wait_s: float) -> None:
    """Wait until every running instance released ``source``'s partitions: at least two
    report intervals, so that an instance that started just before the mark has
    reported (one that has not is not seen at all)."""
    topics = {source, backfill_topic(config.processor.pipeline, source)}
    started = time.monotonic()
    deadline = started + wait_s
    while True:
        waiting = [
            str(r["instance"]) for r in read_instances(config) if not released(r, source, topics)
        ]
        if not waiting and time.monotonic() - started >= 2 * REPORT_EVERY_S:
            return
        if waiting and time.monotonic() > deadline:
            raise TidemarkError(
                f"instances {', '.join(waiting)} did not release {source} within "
                f"{wait_s:.0f} s; nothing was deleted, and the instances keep leaving the "
                "table out: run the command again to finish, or take the removal back "
                "with --cancel"
            )
        time.sleep(1.0)


def _wait_gone(admin: AdminClient, topics: list[str], timeout: float = 30.0) -> None:
    """Wait until the broker says none of ``topics`` exists: the mark is taken back only
    then, or an instance could subscribe to a topic still being deleted."""
    deadline = time.monotonic() + timeout
    while (left := set(topics) - absent_topics(admin, topics)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        raise TidemarkError(
            f"topics {', '.join(sorted(left))} still exist {timeout:.0f} s after their "
            "deletion; the instances keep leaving the table out: run the command again"
        )


def _delete(admin: AdminClient, topics: list[str]) -> None:
    if not topics:
        return
    for name, future in admin.delete_topics(topics, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TidemarkError(f"cannot delete topic {name}: {exc.args[0].str()}") from None
