"""Deciding one batch: input messages and partition state in; outputs and state updates out.

This is protocol step 1 of :mod:`processor.dataplane.commit`,
kept apart from Kafka so it can be tested (and fuzzed) on its own. Per input
partition, in offset order, each message is decoded, then the envelope's rule
(:mod:`processor.reconcile.envelopes`) decides against the partition's state:

- a message that cannot be decoded, or a change the rules cannot complete (the
  ``debezium`` envelope's unfillable TOAST placeholder), becomes a dead letter; the
  partition goes on;
- a change whose key's row must be read again from the source (``debezium-upsert``'s
  unfillable TOAST placeholder) is noted in :attr:`Batch.read_again`, which the commit
  produces as a signal with the outputs;
- a change that breaks its envelope's constraints (the ``debezium`` envelope
  without ``before`` or without a key) refuses its whole source: the batch
  stops at that message and the topic's partitions stay paused there, while
  every other source goes on;
- a Debezium tombstone (null value after a delete) is skipped: the delete
  event itself produced the output and the output tombstone;
- a truncate event (``debezium-upsert``) becomes markers to every partition of the
  table's backfill topic, each of which starts the truncate in its partition: a floor,
  and a wipe of the partition's keys a page per batch
  (:mod:`processor.reconcile.truncates`);
- a record of a backfill topic (:mod:`processor.events.chunk_tag`), a chunk row of an
  incremental snapshot, is decided against the state of the input partition it
  belongs to, in the same batch state as that partition's changes, after them;
  a row of a signal-table window waits in the partition's window buffer
  (:mod:`processor.reconcile.window_buffer`) until that state has passed the window.

Nothing here writes anywhere: state updates stay in each partition's
:class:`~state.store.BatchState` until the commit protocol applies them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import orjson

from processor import metrics
from processor.errors import (
    RegistryRefusedSourceError,
    SourceRefusedError,
    StateFormatError,
    UnfillableError,
)
from processor.events.change import Change, Emit
from processor.events.chunk_tag import UNSIGNED
from processor.events.source_codec import SourceCodec
from processor.events.visibility import Window
from processor.reconcile import asked_again, epochs, truncates, upsert_avro_fast_path
from processor.reconcile import debezium_avro_fast_path as avro_fast_path
from processor.reconcile.batch_reads import READS_KEY, BatchReads, Span
from processor.reconcile.debezium_fast_path import (
    decide_chunk_rows,
    decide_debezium,
    decide_debezium_upsert,
)
from processor.reconcile.envelopes import ENTRY, READ_AGAIN, STEPS, Step, prune_seen
from processor.reconcile.upsert_fast_path import decide_flat
from processor.reconcile.versions import Action, Entry, decide_change
from processor.reconcile.window_buffer import Reached, WindowBuffers
from state.batch import BatchState
from state.store import PartitionStore
from tidemark.core.avro_wire import MAGIC
from tidemark.core.config import Config
from tidemark.core.errors import InputError, RegistryRefusedError
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import backfill_topic, backfilled_topic, changelog_topic, output_topic

#: Keys of ended snapshot groups deleted per partition and batch (debezium envelope).
SEEN_PAGE = 10_000

#: The fewest messages a fused path is given at a time after one it declined (by default).
FUSED_WINDOW = 64

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Record = tuple[str, int, bytes | None, bytes | None]


@dataclass
class InputTopic:
    """One input topic: its envelope, codec and the topics it writes."""

    topic: str
    envelope: str
    step: Step
    codec: SourceCodec
    output: str
    changelog: str


@dataclass
class Batch:
    """What one batch decided: records to produce, state to write, offsets to commit."""

    records: list[Record] = field(default_factory=list)
    dead_letters: list[InputError] = field(default_factory=list)
    states: dict[TopicPartitionKey, BatchState] = field(default_factory=dict)
    next_offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    #: Partitions to read again from an offset (paused for restore or a refused source).
    rewinds: dict[TopicPartitionKey, int] = field(default_factory=dict)
    #: Records per output topic, for the metrics.
    produced: dict[str, int] = field(default_factory=dict)
    #: Window-buffered rows decided in this batch.
    released: int = 0
    #: Per input partition, the decoded event of its last change (its source position).
    last_events: dict[TopicPartitionKey, object] = field(default_factory=dict)
    #: Per input partition whose decisions depend on how its two topics interleaved
    #: here (it read chunk rows or released window rows): what it read of each.
    reads: dict[TopicPartitionKey, BatchReads] = field(default_factory=dict)
    #: Per input partition, its pending keys whose row is to be read again from the
    #: source (:data:`~processor.reconcile.envelopes.READ_AGAIN`): state key to key columns.
    read_again: dict[TopicPartitionKey, dict[bytes, dict[str, object]]] = field(
        default_factory=dict
    )
    #: Per input partition that read a truncate, its markers to every partition of the
    #: backfill topic (:mod:`processor.reconcile.truncates`), produced in its transaction.
    markers: dict[TopicPartitionKey, list[Record]] = field(default_factory=dict)


class Reconciler:
    """The input topics of one pipeline and the decisions on their batches."""

    def __init__(
        self,
        config: Config,
        schemas: SchemaCache | None = None,
        clock: Callable[[], float] = time.time,
        partition_count: Callable[[str], int | None] = lambda _topic: None,
    ) -> None:
        self.config = config
        #: The partitions of an input topic (``None``: unknown), for a truncate's markers.
        self.partition_count = partition_count
        #: Input partitions whose truncate is being applied a page at a time
        #: (:mod:`processor.reconcile.truncates`), and those whose state was looked at.
        self._wiping: set[TopicPartitionKey] = set()
        self._wipes_read: set[TopicPartitionKey] = set()
        #: Keys looked at per partition and batch while a truncate is applied.
        self.wipe_page = truncates.WIPE_PAGE
        #: The wall clock (seconds) that says when pending keys are asked for again.
        self.clock = clock
        #: Per input partition, when its first key noted as asked for is due (ms; ``None``:
        #: none), as last read from its state (:mod:`processor.reconcile.asked_again`).
        self._next_ask: dict[TopicPartitionKey, int | None] = {}
        self.schemas = schemas
        self.topics: dict[str, InputTopic] = {}
        #: Input topics stopped because they break their envelope's constraints.
        self.refused: dict[str, str] = {}
        #: Input partitions stopped because their state holds an entry this release cannot
        #: read (:class:`~processor.errors.StateFormatError`), or because their source's
        #: positions went back (:mod:`processor.reconcile.epochs`).
        self.refused_partitions: dict[TopicPartitionKey, str] = {}
        self.windows = WindowBuffers(config.processor.pipeline)
        #: The largest message reconciled; a larger one is dead-lettered as a reference.
        self.input_limit = config.kafka.max_record_bytes // 2
        #: Whether the fused paths take what they can (``processor.fused_paths``).
        self.fused = config.processor.fused_paths
        #: The fewest messages a fused path is given at a time after one it declined.
        self.fused_window = FUSED_WINDOW

    def topic(self, topic: str) -> InputTopic:
        """The :class:`InputTopic` of input ``topic`` (made on first use)."""
        source = self.topics.get(topic)
        if source is None:
            envelope = self.config.envelope_of(topic)
            output = output_topic(self.config.source.topic_prefix, topic)
            source = self.topics[topic] = InputTopic(
                topic,
                envelope,
                STEPS[envelope],
                SourceCodec(envelope, output, self.schemas),
                output,
                changelog_topic(self.config.processor.pipeline, topic),
            )
        return source

    def decide(
        self,
        groups: Mapping[TopicPartitionKey, list[RawMessage]],
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool] = lambda _tp: False,
        reached: Reached = lambda _tp: 0,
    ) -> Batch:
        """Reconcile each partition's messages (in offset order) against its store.

        A partition without a store (revoked while the batch was in flight) is
        skipped; one that is ``waiting`` (its state being restored) or whose
        source is refused is rewound to its first message. Input partitions go
        before backfill partitions, so a chunk row meets state that holds every
        change of the batch; ``reached`` says how far an input partition's state
        (this batch included) reflects its input, which releases window buffers.
        A partition that read chunk rows or released window rows records its
        :class:`BatchReads`, removed with its state (:mod:`processor.reconcile.batch_reads`).
        """
        batch = Batch()
        #: What each decided group read, and the input partitions that read rows.
        spans: dict[TopicPartitionKey, Span] = {}
        with_rows: set[TopicPartitionKey] = set()
        for owned, owned_store in stores.items():
            if not waiting(owned):
                self.windows.load(owned, owned_store)
        ordered = sorted(groups.items(), key=lambda item: self.state_partition(item[0]) != item[0])
        for tp, group in ordered:
            if not group:
                continue
            state_tp = self.state_partition(tp)
            store = stores.get(state_tp)
            if store is None:
                # A backfill partition whose input partition is not here yet, or a partition
                # of a topic stopped before its state was opened: read again later.
                if state_tp != tp or self.stopped(state_tp):
                    batch.rewinds[tp] = group[0].offset
                continue
            if self.stopped(state_tp) or waiting(state_tp):
                batch.rewinds[tp] = group[0].offset
                continue
            topic = self.topic(state_tp[0])
            with _refusals_of(state_tp[0]):
                newest = None
                if state_tp == tp and topic.envelope != "upsert":
                    went_back, newest = self._went_back(topic, group, batch.states.get(tp) or store)
                    if went_back:
                        batch.rewinds[tp] = group[0].offset
                        continue
                metrics.EVENTS_IN.labels(tp[0]).inc(len(group))
                state = batch.states.get(state_tp)
                if state is None:
                    state = batch.states[state_tp] = BatchState(store)
                if newest is not None:
                    state.put(epochs.NEWEST_SEEN, newest.encode())
                if state_tp == tp and topic.envelope == "debezium-upsert":
                    self._note_frame(topic, group, state)
                self._decide_partition(
                    topic, group, state, batch, reached if state_tp != tp else None
                )
            if topic.envelope == "debezium":
                prune_seen(state, SEEN_PAGE)
            end = batch.next_offsets.get(tp, group[0].offset)
            if end > group[0].offset:
                spans[tp] = (group[0].offset, end - 1)
                if state_tp != tp:
                    with_rows.add(state_tp)
        with_rows.update(self._release_windows(batch, stores, waiting, reached))
        self._ask_again(batch, stores, waiting)
        self._wipe(batch, stores, waiting)
        for tp in with_rows:
            backfill = (backfill_topic(self.config.processor.pipeline, tp[0]), tp[1])
            batch.reads[tp] = BatchReads(spans.get(tp), spans.get(backfill))
            batch.states[tp].put(READS_KEY, None)  # the batch is done once its state is
        return batch

    def _release_windows(
        self,
        batch: Batch,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool],
        reached: Reached,
    ) -> list[TopicPartitionKey]:
        """Decide the buffered rows of partitions whose state has now passed their window;
        return those partitions."""
        releasing = []
        for tp in self.windows.pending():
            store = stores.get(tp)
            if store is None or waiting(tp) or self.stopped(tp):
                continue
            position = reached(tp)
            if not self.windows.due(tp, position):
                continue
            state = batch.states.get(tp)
            if state is None:
                state = batch.states[tp] = BatchState(store)
            released = self.windows.release(tp, state, position)
            batch.released += len(released)
            with _refusals_of(tp[0]):
                self._decide_partition(self.topic(tp[0]), released, state, batch, None, False)
            releasing.append(tp)
        return releasing

    def asks_due(
        self,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool],
    ) -> bool:
        """Whether a partition has a pending key to ask for again now, so that a batch
        must run even if no message came (its noted time read from state on first sight:
        after a restart, or once restored)."""
        now_ms = int(self.clock() * 1000)
        due = False
        for tp, store in stores.items():
            if self._asks_again(tp, waiting):
                due_at = self._due_at(tp, store)
                due = due or (due_at is not None and due_at <= now_ms)
        return due

    def _asks_again(
        self, tp: TopicPartitionKey, waiting: Callable[[TopicPartitionKey], bool]
    ) -> bool:
        """Whether input partition ``tp`` asks for pending keys again now: its envelope
        has pending keys, and it is neither being restored nor stopped."""
        if waiting(tp) or self.stopped(tp):
            return False
        return self.topic(tp[0]).envelope == "debezium-upsert"

    def _due_at(self, tp: TopicPartitionKey, state: BatchState | PartitionStore) -> int | None:
        """When ``tp``'s first noted key is due (ms), read from ``state`` on first sight."""
        if tp not in self._next_ask:
            self._next_ask[tp] = asked_again.next_due(state)
        return self._next_ask[tp]

    def _ask_again(
        self,
        batch: Batch,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool],
    ) -> None:
        """Ask again for the pending keys whose time has come, and note every key the batch
        asks for (:mod:`processor.reconcile.asked_again`)."""
        now_ms = int(self.clock() * 1000)
        retry_s = self.config.processor.read_again_retry_s
        for tp in [tp for tp in self._next_ask if tp not in stores]:
            del self._next_ask[tp]  # revoked: read again from its state if it comes back
        noted: set[tuple[TopicPartitionKey, bytes]] = set()
        for tp, store in stores.items():
            if not self._asks_again(tp, waiting):
                continue
            state = batch.states.get(tp)
            due_at = self._due_at(tp, state or store)
            if due_at is None or due_at > now_ms:
                continue
            if state is None:
                state = batch.states[tp] = BatchState(store)
            try:
                due = asked_again.take_due(state, now_ms)
            except StateFormatError as exc:
                self._refuse_partition(tp, str(exc), RawMessage(tp[0], tp[1], -1, None, None))
                continue
            asked = batch.read_again.setdefault(tp, {})
            for key, fields, count in due:
                if (tp, key) not in noted:
                    noted.add((tp, key))
                    asked[key] = fields
                    asked_again.note(state, key, fields, now_ms, retry_s, count + 1)
            self._next_ask[tp] = asked_again.next_due(state)
        for tp, asked in list(batch.read_again.items()):
            state = batch.states[tp]
            for key, fields in asked.items():
                if (tp, key) not in noted:
                    when = asked_again.note(state, key, fields, now_ms, retry_s, 1)
                    due_at = self._next_ask.get(tp)
                    self._next_ask[tp] = when if due_at is None else min(due_at, when)
            if not asked:
                del batch.read_again[tp]

    def _went_back(
        self, source: InputTopic, group: list[RawMessage], state: BatchState | PartitionStore
    ) -> tuple[bool, epochs.Seen | None]:
        """Whether ``group``'s last change is of a new position epoch of its source
        (:mod:`processor.reconcile.epochs`): its partition then stops before any of the
        group is decided, with the reason. Else the newest change seen, where the group
        changed it (to keep in ``state``)."""
        last = next((m for m in reversed(group) if self._decodable(m)), None)
        if last is None:
            return False, None
        try:
            change = source.codec.decode(last)
        except InputError:
            return False, None  # a dead letter, on the general path
        seen = epochs.seen_of(change.version, change.event)
        if seen is None or change.chunk is not None:
            return False, None
        tp = (last.topic, last.partition)
        stored = state.get(epochs.NEWEST_SEEN)
        try:
            newest = None if stored is None else epochs.Seen.decode(stored)
        except StateFormatError as exc:
            self._refuse_partition(tp, str(exc), last)
            return True, None
        if newest is not None and epochs.went_back(newest, seen):
            self._refuse_partition(
                tp,
                f"the source's positions went back: a change at {seen.version}, committed at "
                f"{seen.committed_ms} ms, is below the newest seen, {newest.version}, committed "
                f"at {newest.committed_ms} ms. That is a new position epoch (a failover to a "
                "replica, another cluster, RESET MASTER), whose changes would be dropped as "
                "older than state: drop the topic's state and backfill its table (Guarantees: "
                "positions that start again)",
                last,
            )
            return True, None
        newer = epochs.newer(newest, seen)
        return False, (None if newer is newest else newer)

    def _decodable(self, raw: RawMessage) -> bool:
        """Whether ``raw`` is a change small enough to be decoded (not a tombstone, not a
        message dead-lettered as too large)."""
        return raw.value is not None and len(raw.value) + len(raw.key or b"") <= self.input_limit

    def _note_frame(self, source: InputTopic, group: list[RawMessage], state: BatchState) -> None:
        """Keep the frame of the group's last key (:func:`truncates.frame_of`), from which
        a truncate makes the output keys of the keys it deletes."""
        last = next((m for m in reversed(group) if m.key is not None), None)
        if last is None or last.key is None:
            return
        try:
            state_key = source.codec.state_key(last)
        except InputError:
            return
        frame = truncates.frame_of(last.key, state_key)
        if frame is not None:
            truncates.note_frame(state, frame)

    def wipes_due(
        self,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool],
    ) -> bool:
        """Whether a partition applies a truncate, a page a batch, so that a batch must run
        even if no message came (a wipe in progress read from state on first sight)."""
        for tp, store in stores.items():
            if tp not in self._wipes_read and not waiting(tp):
                self._wipes_read.add(tp)
                if store.get(truncates.WIPE) is not None:
                    self._wiping.add(tp)
        return any(tp in stores and not waiting(tp) and not self.stopped(tp) for tp in self._wiping)

    def _wipe(
        self,
        batch: Batch,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        waiting: Callable[[TopicPartitionKey], bool],
    ) -> None:
        """Apply a page of each truncate in progress: its keys older than the truncate are
        deleted in state and in the output (:func:`truncates.wipe_page`)."""
        self._wipes_read.intersection_update(stores)
        if not self.wipes_due(stores, waiting):
            return
        for tp in sorted(self._wiping):
            store = stores.get(tp)
            if store is None:
                self._wiping.discard(tp)  # revoked: its owner goes on from its state
                continue
            if waiting(tp) or self.stopped(tp):
                continue
            state = batch.states.get(tp)
            if state is None:
                state = batch.states[tp] = BatchState(store)
            source = self.topic(tp[0])
            try:
                with _refusals_of(tp[0]):
                    page = truncates.wipe_page(state, self.wipe_page)
                    if page is not None and page.wiped:
                        self._delete_wiped(source, tp, page.wipe, page.wiped, state, batch)
            except (StateFormatError, InputError) as exc:
                origin = RawMessage(tp[0], tp[1], -1, None, None)
                self._refuse_partition(tp, f"a truncate cannot be applied: {exc}", origin)
                continue
            if page is None:
                self._wiping.discard(tp)
                continue
            truncates.write_page(state, page)
            if page.cursor is None:
                self._wiping.discard(tp)

    def _delete_wiped(
        self,
        source: InputTopic,
        tp: TopicPartitionKey,
        wipe: truncates.Wipe,
        wiped: list[truncates.Wiped],
        state: BatchState,
        batch: Batch,
    ) -> None:
        """The output of keys a truncate deleted: each one's delete event (its row as the
        retraction, the truncate's position and source) and its tombstone."""
        event = RawMessage(tp[0], wipe.origin[0], wipe.origin[1], None, wipe.event)
        truncate = source.codec.decode_truncate(event)
        if truncate is None:
            raise InputError("the truncate kept in state is not a truncate event", event)
        records: list[Record] = []
        output = source.output
        for key in wiped:
            key_bytes = truncates.key_of(state, key.key)
            if key_bytes is None:
                raise InputError("no key of the table was ever seen in the partition", event)
            emit = Emit("d", key.row, None, "truncate")
            msg = event._replace(key=key_bytes)
            out_key, value = source.codec.encode(truncate, emit, msg)
            if value is not None:
                records.append((output, tp[1], out_key, value))
            records.append((output, tp[1], out_key, None))
        batch.records += records
        batch.produced[output] = batch.produced.get(output, 0) + 2 * len(wiped)
        metrics.TRUNCATED_ROWS.labels(tp[0]).inc(len(wiped))

    def _truncate(
        self,
        source: InputTopic,
        raw: RawMessage,
        change: Change,
        state: BatchState,
        batch: Batch,
        state_tp: TopicPartitionKey,
    ) -> None:
        """A truncate event: from the input topic, its markers go to every partition's
        owner; a marker (from the backfill topic) starts the truncate in this partition.
        Where it cannot be applied it is a dead letter that says why."""
        why = None
        if source.envelope != "debezium-upsert":
            why = (
                f"a TRUNCATE of the table: not applied under the {source.envelope} envelope, "
                "which keeps no row per key to delete; the table's rows stay in the "
                "reconciled topic (docs: Guarantees, TRUNCATE)"
            )
        if why is not None:
            batch.dead_letters.append(InputError(why, raw, "truncate"))
            return
        assert raw.value is not None
        if raw.topic == source.topic:
            count = self.partition_count(source.topic)
            if count is None:
                why = "a TRUNCATE whose topic's partitions are unknown: not applied"
                batch.dead_letters.append(InputError(why, raw, "truncate"))
                return
            backfill = backfill_topic(self.config.processor.pipeline, source.topic)
            origin = (raw.partition, raw.offset)
            sent = batch.markers.setdefault(state_tp, [])
            sent += truncates.markers(backfill, count, origin, raw.value)
            metrics.TRUNCATES.labels(source.topic).inc()
            return
        origin_at = truncates.origin_of(raw.key)
        assert origin_at is not None
        truncate = truncates.truncate_of(change.version, change.txid, change.event)
        if truncates.receive(state, truncate, raw.value, origin_at):
            self._wiping.add(state_tp)

    def stopped(self, tp: TopicPartitionKey) -> bool:
        """Whether input partition ``tp`` is stopped: its topic refused, or itself."""
        return tp[0] in self.refused or tp in self.refused_partitions

    def state_partition(self, tp: TopicPartitionKey) -> TopicPartitionKey:
        """The input partition whose state decides ``tp``'s records (itself, or a backfill's)."""
        input_topic = backfilled_topic(self.config.processor.pipeline, tp[0])
        return tp if input_topic is None else (input_topic, tp[1])

    def _decide_partition(
        self,
        source: InputTopic,
        group: list[RawMessage],
        state: BatchState,
        batch: Batch,
        reached: Reached | None = None,
        advance: bool = True,
    ) -> None:
        """Decide ``group`` in order. A window's chunk row whose partition's state has
        not ``reached`` the row's end offset waits in the window buffer;
        ``advance=False`` for rows released from it, read in an earlier batch.

        The fused paths (:mod:`processor.reconcile.upsert_fast_path`,
        :mod:`processor.reconcile.debezium_fast_path` and their Avro twins) take what they
        can; the general path decides what they do not (:meth:`_decide_group`), and all of
        it when they are switched off (``processor.fused_paths``) or have none for the
        records (a backfill's rows of the other envelopes)."""
        if not group:
            return
        tp = (group[0].topic, group[0].partition)
        records = batch.records
        first_record = len(records)
        backfill = tp[0] != source.topic
        # Outputs of every input offset below the checkpoint are in Kafka already
        # (acknowledged before the state was written): a replay of them, after a crash or
        # an offsets rewind that kept state, is not emitted again.
        flushed = -1 if backfill else state.flushed_offset()
        output = source.output
        last: Change | bytes | dict[str, object] | None = None  # the last change taken
        stopped = False
        if (
            not self.fused
            or (backfill and source.envelope != "debezium-upsert")
            or (not backfill and _below_floor(source, state))
        ):
            dropped, stopped, last = self._decide_general(
                source, group, group[0].offset, state, batch, reached, advance, flushed
            )
        else:
            dropped, stopped, last = self._decide_group(
                source, group, state, batch, reached, advance, flushed
            )
        if not stopped and advance:
            batch.next_offsets[tp] = group[-1].offset + 1
            if isinstance(last, Change) and not backfill:
                batch.last_events[tp] = last.event
            elif isinstance(last, bytes):
                batch.last_events[tp] = orjson.loads(last)
            elif isinstance(last, dict):
                batch.last_events[tp] = last
        if dropped:
            metrics.EVENTS_DROPPED.labels(tp[0]).inc(dropped)
        produced = len(records) - first_record
        batch.produced[output] = batch.produced.get(output, 0) + produced

    def _decide_group(
        self,
        source: InputTopic,
        group: list[RawMessage],
        state: BatchState,
        batch: Batch,
        reached: Reached | None,
        advance: bool,
        flushed: int,
    ) -> tuple[int, bool, Change | bytes | dict[str, object] | None]:
        """``group`` (a change topic's, or a backfill topic's chunk rows): the fused path of
        its envelope and format takes what it can; the general path decides each message
        it does not take (a chunk's first row among them, from which the codec learns the
        chunk's envelope), and the fused path goes on after it. Where the fused path took
        nothing since, the general path decides the rest. The fused path is given a window
        of the messages at a time, twice what it took before the last it declined (at least
        :attr:`fused_window`), so that its set-up per call (state keys, a multi-get) stays in
        proportion to what it takes.

        Returns the messages dropped, whether the source was refused, and the last change
        taken: a :class:`Change`, or a fused path's payload (bytes) or decoded fields."""
        dropped, index, end, window = 0, 0, len(group), len(group)
        last: Change | bytes | dict[str, object] | None = None
        while index < end:
            run = group[index : index + window]
            taken, more, fused_last = self._decide_fused(source, run, state, batch, flushed)
            dropped += more
            index += taken
            last = fused_last if fused_last is not None else last
            if taken == len(run):
                window *= 2
                continue
            upto = index + 1 if taken or index == 0 else end
            window = max(self.fused_window, 2 * taken)
            more, stopped, general_last = self._decide_general(
                source, group[index:upto], group[0].offset, state, batch, reached, advance, flushed
            )
            dropped += more
            if stopped:
                return dropped, True, last
            last = general_last if general_last is not None else last
            index = upto
        return dropped, False, last

    def _decide_fused(
        self,
        source: InputTopic,
        run: list[RawMessage],
        state: BatchState,
        batch: Batch,
        flushed: int,
    ) -> tuple[int, int, bytes | dict[str, object] | None]:
        """What the fused path of ``source``'s envelope, for the format of ``run``'s first
        key, takes of ``run``: how many, how many of them dropped, the last one's payload.
        A backfill topic's run is chunk rows (``debezium-upsert``'s, JSON)."""
        codec, output, records, limit = source.codec, source.output, batch.records, self.input_limit
        envelope, avro = source.envelope, _avro(run)
        if run[0].topic != source.topic:
            if not _after_floor(run[0], state):
                return 0, 0, None  # rows read before a truncate: the general path drops some
            taken, dropped = decide_chunk_rows(codec.json, run, state, output, records, limit)
            return taken, dropped, None
        if envelope == "upsert" and avro:
            taken, dropped = upsert_avro_fast_path.decide_flat(
                codec.avro, run, state, output, records, flushed, limit
            )
            return taken, dropped, None
        if envelope == "upsert":
            now_ms = int(time.time() * 1000)
            taken, dropped = decide_flat(
                codec.json, run, state, output, records, flushed, now_ms, limit
            )
            return taken, dropped, None
        if envelope == "debezium-upsert" and avro:
            return avro_fast_path.decide_debezium_upsert(
                codec.avro, run, state, output, records, flushed, limit
            )
        if envelope == "debezium-upsert":
            return decide_debezium_upsert(codec.json, run, state, output, records, flushed, limit)
        if envelope == "debezium" and avro:
            return avro_fast_path.decide_debezium(codec.avro, run, state, output, records, limit)
        if envelope == "debezium":
            return decide_debezium(codec.json, run, state, output, records, limit)
        return 0, 0, None

    def _decide_general(
        self,
        source: InputTopic,
        rest: list[RawMessage],
        first_offset: int,
        state: BatchState,
        batch: Batch,
        reached: Reached | None,
        advance: bool,
        flushed: int,
    ) -> tuple[int, bool, Change | None]:
        """Decode ``rest`` (messages of one partition from ``first_offset`` on), then decide
        each against ``state`` by the envelope's rule. Returns the messages dropped,
        whether the source was refused (the batch stops at the offending message), and
        the last change decoded."""
        if not rest:
            return 0, False, None
        tp = (rest[0].topic, rest[0].partition)
        state_tp = (source.topic, tp[1])
        hold_below: int | None = None
        codec, step, records, output = source.codec, source.step, batch.records, source.output
        upsert = source.envelope == "upsert"
        backfill = tp[0] != source.topic
        decoded: list[tuple[RawMessage, Change | InputError | None]] = []
        dropped = 0
        limit = self.input_limit
        for raw in rest:
            size = len(raw.key or b"") + len(raw.value or b"")
            if size > limit:
                decoded.append((raw, self._too_large(raw, size)))
                continue
            if raw.value is None and raw.key is not None and not upsert:
                decoded.append((raw, None))  # Debezium's tombstone after a delete event
                continue
            if backfill and raw.chunk is UNSIGNED:
                reason = "backfill record not signed with the pipeline's record key"
                decoded.append((raw, InputError(reason, raw, "unsigned")))
                continue
            if backfill and truncates.origin_of(raw.key) is not None:
                decoded.append((raw, _marker(codec, raw)))
                continue
            if backfill and not _tag_fits(raw):
                reason = "backfill record without readable tidemark.chunk/snapshot/window headers"
                decoded.append((raw, InputError(reason, raw, "backfill-headers")))
                continue
            try:
                decoded.append((raw, codec.decode(raw)))
            except InputError as exc:
                decoded.append((raw, exc))
        if source.envelope != "debezium":
            state.prefetch([ENTRY + c.key for _, c in decoded if isinstance(c, Change)])
        # A truncate's floor, for keys without state (:mod:`processor.reconcile.truncates`).
        floor = None
        if source.envelope == "debezium-upsert":
            try:
                floor = truncates.floor(state)
            except StateFormatError as exc:
                self._refuse_partition(state_tp, str(exc), rest[0])
                if advance:
                    batch.rewinds[tp] = rest[0].offset
                    if rest[0].offset > first_offset:
                        batch.next_offsets[tp] = rest[0].offset
                return 0, True, None
        for raw, change in decoded:
            if change is None:
                continue
            if isinstance(change, Change) and change.op == "t":
                self._truncate(source, raw, change, state, batch, state_tp)
                floor = truncates.floor(state)
                continue
            if floor is not None and isinstance(change, Change):
                chunk = change.chunk is not None
                if not chunk and not floor.passed and change.version >= floor.truncate.version:
                    floor = truncates.pass_floor(state, floor)
                if (chunk or not floor.passed) and state.get(ENTRY + change.key) is None:
                    read_in = change.read_in if chunk else None
                    if truncates.below_floor(floor, change.version, read_in):
                        dropped += 1
                        continue
            try:
                if isinstance(change, InputError):
                    if change.kind == "no-key" and source.envelope == "debezium":
                        raise SourceRefusedError(
                            "a change without a key: the debezium envelope needs tables "
                            "with primary keys"
                        )
                    batch.dead_letters.append(change)
                    marked = None
                    if source.envelope == "debezium-upsert" and not backfill:
                        marked = _mark_pending(codec, raw, state)
                    if marked is not None:
                        try:
                            fields = codec.key_fields(raw)
                        except InputError:
                            continue
                        batch.read_again.setdefault(state_tp, {})[marked] = fields
                    continue
                if reached is not None and isinstance(change.read_in, Window):
                    if hold_below is None:
                        hold_below = reached(state_tp)
                    if change.read_in.ends[raw.partition] > hold_below:
                        self.windows.hold(state_tp, state, change.key, raw)
                        continue
                try:
                    emit = step(change, state, codec)
                except UnfillableError as exc:
                    batch.dead_letters.append(InputError(str(exc), raw, "toast"))
                    continue
                if emit is not None and emit.reason == READ_AGAIN:
                    asked = batch.read_again.setdefault(state_tp, {})
                    asked[change.key] = codec.key_fields(raw)
                    continue
            except SourceRefusedError as exc:
                if isinstance(exc, StateFormatError):
                    self._refuse_partition(state_tp, str(exc), raw)
                else:
                    self._refuse(source.topic, str(exc), raw)
                if advance:
                    batch.rewinds[tp] = raw.offset
                    if raw.offset > first_offset:
                        batch.next_offsets[tp] = raw.offset
                return dropped, True, None
            if emit is None or (emit.reason == "replayed" and raw.offset < flushed):
                dropped += 1
                continue
            key, value = codec.encode(change, emit, raw)
            if value is not None:
                records.append((output, raw.partition, key, value))
            if emit.after is None:
                records.append((output, raw.partition, key, None))
        last = next((c for _, c in reversed(decoded) if isinstance(c, Change)), None)
        return dropped, False, last

    def _too_large(self, raw: RawMessage, size: int) -> InputError:
        """A dead letter that refers to ``raw``, which is too large to reconcile: its bytes
        may not fit the dead-letter topic either."""
        reason = (
            f"{size} bytes, above {self.input_limit}: half of kafka.max_record_bytes "
            f"({self.config.kafka.max_record_bytes}), since an output may carry the old row "
            "and the new"
        )
        reference = orjson.dumps(
            {
                "topic": raw.topic,
                "partition": raw.partition,
                "offset": raw.offset,
                "size": size,
                "reason": reason,
            }
        )
        key = raw.key if raw.key is not None and len(raw.key) <= self.input_limit else None
        letter = RawMessage(raw.topic, raw.partition, raw.offset, key, reference, raw.chunk)
        return InputError(reason, letter, "too-large")

    def _refuse_partition(self, tp: TopicPartitionKey, reason: str, raw: RawMessage) -> None:
        """Stop input partition ``tp`` (it stays paused at the offending message)."""
        if tp not in self.refused_partitions:
            log.error(
                "input partition %s[%d] stopped at %s[%d] offset %d: %s",
                tp[0],
                tp[1],
                raw.topic,
                raw.partition,
                raw.offset,
                reason,
            )
        self.refused_partitions[tp] = reason
        metrics.PARTITION_REFUSED.labels(tp[0], str(tp[1])).set(1)

    def _refuse(self, topic: str, reason: str, raw: RawMessage) -> None:
        """Stop ``topic`` (its partitions stay paused at the offending message)."""
        if topic not in self.refused:
            log.error(
                "input topic %s stopped at partition %d offset %d: %s",
                topic,
                raw.partition,
                raw.offset,
                reason,
            )
        self.refuse_topic(topic, reason)

    def refuse_topic(self, topic: str, reason: str) -> None:
        """Stop input ``topic`` for ``reason``: its partitions stay paused."""
        self.refused[topic] = reason
        metrics.SOURCE_REFUSED.labels(topic).set(1)

    def forget_topic(self, topic: str) -> None:
        """Input ``topic``'s table was removed: what was decided of it goes, so that a
        table made again under its name starts afresh (its refusals too)."""
        self.refused.pop(topic, None)
        for tp in [tp for tp in self.refused_partitions if tp[0] == topic]:
            del self.refused_partitions[tp]
        self.topics.pop(topic, None)


@contextmanager
def _refusals_of(topic: str) -> Iterator[None]:
    """The schema registry's refusal of what deciding input ``topic`` needed, as that
    topic's (:class:`RegistryRefusedSourceError`): the batch is dropped, the topic stops."""
    try:
        yield
    except RegistryRefusedError as exc:
        raise RegistryRefusedSourceError(topic, str(exc)) from None


def _mark_pending(codec: SourceCodec, raw: RawMessage, state: BatchState) -> bytes | None:
    """A change of ``raw``'s key became a dead letter: the key's row in state is no longer
    the source's. Its entry becomes pending (at the change's version when it can be read,
    else at its own), keeping the row last emitted as the next output's retraction, and
    its row is to be read again (returns the key's bytes in state if it was marked): until
    it comes, an update whose unchanged TOAST values would have been filled from that row
    asks for the key's row too, and one that carries its whole row is applied as usual."""
    try:
        state_key = codec.state_key(raw)
    except InputError:
        return None  # no key to mark
    key = ENTRY + state_key
    stored_raw = state.get(key)
    stored = Entry.decode(stored_raw) if stored_raw is not None else None
    try:
        change: Change | None = codec.decode(raw)
    except InputError:
        change = None
    emitted = stored.value if stored is not None else None
    if change is not None and change.chunk is None:
        if decide_change(change.version, change.txid, stored, positions=True) is Action.APPLY:
            entry = Entry(change.version, emitted, change.txid, pending=True)
            state.put(key, entry.encode())
            return state_key
        return None
    if stored is not None and not stored.pending:
        state.put(key, stored._replace(pending=True).encode())
        return state_key
    return None


def _below_floor(source: InputTopic, state: BatchState) -> bool:
    """Whether ``state``'s input partition has not yet read a change at or above its last
    truncate, so that changes of keys without state must meet the truncate's floor, which
    the fused paths do not read."""
    if source.envelope != "debezium-upsert":
        return False
    try:
        floor = truncates.floor(state)
    except StateFormatError:
        return True  # the general path stops the partition, with the reason
    return floor is not None and not floor.passed


def _after_floor(row: RawMessage, state: BatchState) -> bool:
    """Whether backfill record ``row``'s chunk was read after its partition's last truncate
    (or none came), so that the fused path, which does not read the floor, may take it."""
    try:
        floor = truncates.floor(state)
    except StateFormatError:
        return False  # the general path stops the partition, with the reason
    tag = row.chunk
    if tag is UNSIGNED:
        return False  # the general path makes it a dead letter
    return floor is None or tag is None or floor.truncate.seen_by(tag.read_in)


def _marker(codec: SourceCodec, raw: RawMessage) -> Change | InputError:
    """The truncate a backfill topic's marker carries (:mod:`processor.reconcile.truncates`),
    or why it is a dead letter."""
    try:
        change = codec.decode_truncate(raw)
    except InputError as exc:
        return exc
    if change is None:
        return InputError("a truncate marker that is not a truncate event", raw, "truncate")
    return change


def _avro(group: list[RawMessage]) -> bool:
    """Whether ``group`` starts with an Avro key (for the Avro fast paths)."""
    key = group[0].key
    return key is not None and key[:1] == MAGIC


def _tag_fits(raw: RawMessage) -> bool:
    """Whether a backfill record has a chunk tag (with a window end for its partition)."""
    tag = raw.chunk
    if tag is None:
        return False
    return not isinstance(tag.read_in, Window) or raw.partition < len(tag.read_in.ends)
