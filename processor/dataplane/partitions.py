"""The input partitions one data plane owns: assigned and revoked, restored, held back, lagging.

When the group assigns an input partition, its store is opened and brought up
to date from its changelog (:class:`state.changelog.Restorer`) before any of
its input is read; until then the partition and its backfill partition are
paused. A backfill partition is read only while its input partition is here
and not held back, since its rows are decided against that partition's state.
On revoke a partition's store is closed: its state is another instance's now.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.dataplane.writers import Writers
from processor.reconcile.batch import Reconciler, TopicPartitionKey
from state.changelog import Restorer
from state.store import Checkpoint, PartitionStore, StateBackend, from_other_topics, topics_identity
from tidemark.core.config import Config
from tidemark.core.errors import TopicError
from tidemark.core.kafka import (
    absent_topics,
    consumer_config,
    counts_in,
    ensure_topics,
    output_topic_config,
    partition_counts,
    record_topic_config,
    topic_ids,
)
from tidemark.core.topics import backfill_topic, backfilled_topic, output_topic, reader_group

log = logging.getLogger(__name__)

#: Seconds after a restore resumed a partition during which it is resumed again, each time
#: the lag is read, until one of its messages is read (:meth:`Partitions.resume_again`).
RESUME_AGAIN_S = 60.0
#: After that, every this many seconds, until one of its messages is read.
RESUME_LATER_S = 30.0


class Partitions:
    """The stores of the input partitions this instance owns, and their restores."""

    def __init__(
        self,
        config: Config,
        backend: StateBackend,
        reconciler: Reconciler,
        admin: AdminClient,
        paused: Callable[[], bool],
        released: Callable[[TopicPartitionKey], None],
    ) -> None:
        self._config = config
        self._pipeline = config.processor.pipeline
        self._backend = backend
        self._reconciler = reconciler
        self._admin = admin
        self.stores: dict[TopicPartitionKey, PartitionStore] = {}
        #: The owned input partitions' producers (their ids fence the previous owners).
        self.writers = Writers(config)
        #: Committed offsets of input partitions whose restored state has no checkpoint.
        self._committed: dict[TopicPartitionKey, int] = {}
        self._restorer = Restorer(
            consumer_config(config.kafka, reader_group(self._pipeline, "restore")), admin
        )
        #: Whether the pipeline is paused: newly assigned or restored partitions stay paused.
        self._paused = paused
        #: Told of each input partition that leaves this instance.
        self._released = released
        #: Partitions of each input topic, learned when it is first assigned.
        self.partition_counts: dict[str, int] = {}
        #: Input topics stopped because partitions were added to them.
        self._grown: set[str] = set()
        #: Partitions a restore resumed, none of whose messages was read since: when.
        self._resumed: dict[TopicPartitionKey, float] = {}
        #: When the partitions resumed over ``RESUME_AGAIN_S`` ago are resumed next, and
        #: those of them the log has named.
        self._next_late_resume = 0.0
        self._said: set[TopicPartitionKey] = set()

    # -- the group's callbacks -----------------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Open the stores of newly assigned input partitions and start their restores."""
        backfills = [p for p in partitions if self.is_backfill(p.topic)]
        partitions = [p for p in partitions if not self.is_backfill(p.topic)]
        topics = {p.topic for p in partitions}
        listed = self._admin.list_topics(timeout=10).topics if topics else {}
        # Asked at every assignment: a topic made again with another count gets the
        # producers of its new slots.
        self.partition_counts.update(counts_in(listed, topics))
        made = self._reconciler.topic
        # Topics first seen, and those whose derived topics are gone (a table removed,
        # then made again, while this instance ran).
        new = {
            t
            for t in topics
            if t not in self._reconciler.topics
            or made(t).changelog not in listed
            or made(t).output not in listed
        }
        if new:
            kafka = self._config.kafka
            replication = kafka.replication_factor
            compacted = record_topic_config(kafka, **{"cleanup.policy": "compact"})
            topic = self._reconciler.topic
            outputs = {topic(t).output: self.partition_counts[t] for t in new}
            changelogs = {topic(t).changelog: self.partition_counts[t] for t in new}
            ensure_topics(self._admin, changelogs, replication, config=compacted)
            ensure_topics(self._admin, outputs, replication, output_topic_config(kafka))
        self._refuse_grown(topics)
        consumer.assign(partitions + backfills)
        stores = {}
        for p in partitions:
            tp = (p.topic, p.partition)
            if self._reconciler.stopped(tp) and p.topic in self._grown:
                continue  # no changelog partition to restore from, no output to write to
            # The producer first: once it exists, the previous owner can write no more.
            self.writers.take(tp, self.partition_counts[p.topic])
            store = self.stores[tp] = self._backend.open(p.topic, p.partition)
            stores[(self._reconciler.topic(p.topic).changelog, p.partition)] = store
        self._forget_other_topics(stores)
        self._restorer.add(stores)
        everything = partitions + backfills
        held = everything if self._paused() else self.held(everything)
        if held:
            consumer.pause(held)
        waiting = [p for p in partitions if self.restoring((p.topic, p.partition))]
        metrics.ASSIGNED_PARTITIONS.set(len(self.stores))
        metrics.RESTORING_PARTITIONS.set(len(waiting))
        log.info(
            "assigned %d partitions (%d restoring state): %s",
            len(partitions),
            len(waiting),
            ", ".join(f"{p.topic}[{p.partition}]" for p in partitions),
        )

    def _forget_other_topics(self, stores: dict[tuple[str, int], PartitionStore]) -> None:
        """Wipe each store (by changelog partition) whose state comes from topics of the
        same names deleted since (a table removed, then added again), before its restore,
        and record the topics' identity in the others."""
        inputs = {s.changelog: s.topic for s in self._reconciler.topics.values()}
        ids = topic_ids(self._admin, {n for c, _ in stores for n in (c, inputs[c])})
        for (changelog, partition), store in stores.items():
            identity = topics_identity(ids.get(inputs[changelog]), ids.get(changelog))
            checkpoint = store.checkpoint()
            if identity is None and checkpoint.topics is not None:
                # Unchecked, the state could decide a new table's records: asked again.
                raise TopicError(
                    f"cannot learn the topic ids of {inputs[changelog]} and {changelog}, "
                    "to check that its state is theirs"
                )
            if from_other_topics(checkpoint, identity):
                log.warning(
                    "%s[%d]: its topics were deleted and made again since this state was "
                    "written: rebuilding it from the new changelog",
                    inputs[changelog],
                    partition,
                )
                store.wipe()
                checkpoint = Checkpoint()
            if identity is not None and checkpoint.topics != identity:
                store.commit({}, Checkpoint(topics=identity))

    def forget_removed(self, marked: set[str]) -> bool:
        """Delete the state this instance keeps of ``marked`` topics (of tables being
        removed), and of topics the broker says it no longer has (a table removed while
        this instance was away): nothing will read it again, and the topics, made again,
        are others. Their series leave ``/metrics`` too, and their refusals: a table made
        again starts afresh. A topic whose partitions are open here keeps its state.
        Whether a marked topic's partitions are still open here (run again later).

        Not in a rebalance callback: the database may be closed then, and the group
        waits on them."""
        held = self._backend.topics()
        open_here = {t for t, _ in self.stores}
        doomed = (held - open_here) & marked
        unmarked = held - open_here - marked
        if unmarked:
            gone = absent_topics(self._admin, unmarked)
            if len(gone) > max(1, len(unmarked) // 2):
                # most of them at once: more likely a broker that lost its metadata than
                # as many tables removed (a removal by the command marks them)
                log.warning(
                    "the broker says %d of the %d topics this instance keeps state of do "
                    "not exist: their state is kept",
                    len(gone),
                    len(unmarked),
                )
            else:
                doomed |= gone
        for topic in sorted(doomed):
            self._backend.drop(topic)
            log.info("deleted the state of %s: its table was removed", topic)
        let_go = (marked - open_here) | doomed
        for topic in let_go:
            self._reconciler.forget_topic(topic)
            self._grown.discard(topic)
        metrics.forget_topics(
            name
            for topic in let_go
            for name in (topic, backfill_topic(self._pipeline, topic), self._output_of(topic))
        )
        return bool(open_here & marked)

    def _output_of(self, topic: str) -> str:
        """Input ``topic``'s output topic (without making its :class:`InputTopic`)."""
        return output_topic(self._config.source.topic_prefix, topic)

    def _refuse_grown(self, topics: set[str]) -> None:
        """Stop each of ``topics`` that has more partitions than the topics made for it
        (its output, changelog and backfill topic): partitions were added to it after.
        Its new partitions have no changelog to restore from and no output partition,
        and its keys moved between partitions, so its state no longer holds them."""
        derived = {t: self._derived(t) for t in topics}
        counts = partition_counts(
            self._admin, [*topics, *(d for ds in derived.values() for d in ds)]
        )
        for topic in topics:
            made = [counts[d] for d in derived[topic] if d in counts]
            if topic not in counts or not made or counts[topic] <= min(made):
                continue
            self._grown.add(topic)
            reason = (
                f"{topic} has {counts[topic]} partitions, but the topics made for it have "
                f"{min(made)}: partitions were added to it, which moves keys between "
                "partitions and leaves the new ones without state. Keep a change topic's "
                "partition count; to change it, give the pipeline a new name (or delete its "
                "output, changelog and backfill topics), and backfill the table"
            )
            if topic not in self._reconciler.refused:
                log.error("input topic %s stopped: %s", topic, reason)
            self._reconciler.refuse_topic(topic, reason)

    def _derived(self, topic: str) -> list[str]:
        """The topics Tidemark made for input ``topic``."""
        made = self._reconciler.topic(topic)
        return [made.output, made.changelog, backfill_topic(self._pipeline, topic)]

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Release the input partitions the group took away."""
        self.release([(p.topic, p.partition) for p in partitions if not self.is_backfill(p.topic)])
        consumer.unassign()
        log.info("revoked %d partitions", len(partitions))

    def release(self, partitions: list[TopicPartitionKey]) -> None:
        """Forget the state of input ``partitions``: they are no longer this instance's."""
        self._restorer.remove([(self._reconciler.topic(t).changelog, p) for t, p in partitions])
        for tp in partitions:
            store = self.stores.pop(tp, None)
            if store is not None:
                store.close()
            self.writers.give_up(tp)
            self._reconciler.windows.forget(tp)
            self._released(tp)
            self._committed.pop(tp, None)
            self._resumed.pop(tp, None)
            self._resumed.pop((backfill_topic(self._pipeline, tp[0]), tp[1]), None)
            self._said.discard(tp)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(tp[0], str(tp[1]))
        metrics.ASSIGNED_PARTITIONS.set(len(self.stores))

    def release_all(self) -> None:
        """Leaving the group: every store is closed, every producer given up (a partition
        whose store failed to open holds one too)."""
        self.release(sorted(set(self.stores) | set(self.writers.of)))

    # -- what may be read -----------------------------------------------------------

    def held(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Those of ``partitions`` that must not be read now: input partitions whose state
        is being restored or that are stopped (their source, or their state, refused), and
        backfill partitions whose input partition is held or not assigned here."""
        stopped = self._reconciler.stopped
        held = {
            (p.topic, p.partition)
            for p in partitions
            if not self.is_backfill(p.topic)
            and (self.restoring((p.topic, p.partition)) or stopped((p.topic, p.partition)))
        }

        def held_back(backfill: TopicPartition) -> bool:
            owner = self._reconciler.state_partition((backfill.topic, backfill.partition))
            return owner in held or owner not in self.stores

        return [
            p
            for p in partitions
            if (p.topic, p.partition) in held or (self.is_backfill(p.topic) and held_back(p))
        ]

    def is_backfill(self, topic: str) -> bool:
        return backfilled_topic(self._pipeline, topic) is not None

    def restoring(self, tp: TopicPartitionKey) -> bool:
        """Whether input partition ``tp``'s state is still being restored."""
        return self._restorer.restoring(self._reconciler.topic(tp[0]).changelog, tp[1])

    # -- restores ----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a store is being restored."""
        return self._restorer.busy

    def restore_step(self, consumer: Consumer, subscribed: list[str]) -> None:
        """Apply changelog records for a bounded time; resume the partitions restored."""
        inputs = {s.changelog: s.topic for s in self._reconciler.topics.values()}
        reading = set(subscribed)
        resumed: list[TopicPartition] = []
        for done in self._restorer.step():
            input_topic = inputs.get(done.topic)
            if input_topic is None:
                continue
            metrics.RESTORE_RECORDS.labels(input_topic).inc(done.records)
            log.info(
                "restored state of %s[%d]: %d changelog records in %.2f s",
                input_topic,
                done.partition,
                done.records,
                done.seconds,
            )
            if not self._reconciler.stopped((input_topic, done.partition)) and not self._paused():
                resumed += [
                    TopicPartition(topic, done.partition)
                    for topic in (input_topic, backfill_topic(self._pipeline, input_topic))
                    if topic in reading
                ]
        if resumed:
            consumer.resume(resumed)
            now = time.monotonic()
            self._resumed.update(((p.topic, p.partition), now) for p in resumed)
            log.info("resumed %d partitions restored", len(resumed))
        metrics.RESTORING_PARTITIONS.set(sum(1 for tp in self.stores if self.restoring(tp)))

    def reached(self, consumer: Consumer, tp: TopicPartitionKey) -> int:
        """The next offset of input partition ``tp`` that its state has not seen.

        Every message consumed so far has been decided by then (input partitions
        go first in a batch), but those a replay cut (:mod:`processor.dataplane.replay`),
        whose seek leaves no position; the state's checkpoint covers a replay after a
        crash, and the group's committed offset a store restored from the changelog.
        """
        position = consumer.position([TopicPartition(tp[0], tp[1])])[0].offset
        known = self.stores[tp].checkpoint().input_offset
        if known is None:
            known = self._committed.get(tp)
            if known is None:
                committed = consumer.committed([TopicPartition(tp[0], tp[1])], timeout=10)
                known = self._committed[tp] = max(0, committed[0].offset)
        return max(position, known)

    def update_lag(self, consumer: Consumer) -> None:
        """Export each owned partition's lag behind its end (a partition not read since its
        assignment: from its committed offset, when Kafka answers for it)."""
        if not self.stores:
            return
        assigned = [TopicPartition(t, p) for t, p in self.stores]
        positions = consumer.position(assigned)
        unread = [TopicPartition(tp.topic, tp.partition) for tp in positions if tp.offset < 0]
        committed: dict[tuple[str, int], int] = {}
        if unread:
            try:
                committed = {
                    (tp.topic, tp.partition): tp.offset
                    for tp in consumer.committed(unread, timeout=5)
                }
            except KafkaException as exc:  # a metric is not worth a turn
                log.debug("committed offsets for the lag: %s", exc)
        for tp in positions:
            key = (tp.topic, tp.partition)
            if tp.offset < 0 and key not in committed:
                continue
            try:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high < 0:
                continue
            lag = lag_of(tp.offset, committed.get(key, -1), low, high)
            metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)

    def read(self, tp: TopicPartitionKey) -> None:
        """A message of ``tp`` (an input or backfill partition) was read: its resume took."""
        self._resumed.pop(tp, None)
        self._said.discard(tp)

    def resume_again(self, consumer: Consumer) -> None:
        """Resume again the partitions a restore resumed and none of whose messages was
        read since, but those held back: at each lag reading for ``RESUME_AGAIN_S`` after
        their resume, then every ``RESUME_LATER_S``, until one of their messages is read.

        librdkafka (2.16) drops a resume issued while a newly assigned partition still
        waits for its committed offset ("Not resuming stopped ... state none" in its
        debug log), and the partition stays paused: at 500 tables on a busy broker,
        partitions whose state was restored within a second of their assignment were
        never read again; once, after an instance joined again with 1,000 partitions on
        a CPU-bound broker, 149 were not read in minutes, which a wait longer than the
        first minute would explain (not proven). Nothing says when the wait is over (a
        partition not read has no position), so the resume is repeated, less often after
        the first minute. A partition that has fetched nothing loses nothing to a resume;
        one that read a message leaves the list, as does one revoked."""
        if not self._resumed or self._paused():
            return
        now = time.monotonic()
        late = now >= self._next_late_resume
        if late:
            self._next_late_resume = now + RESUME_LATER_S
        waiting = [
            TopicPartition(t, p)
            for (t, p), since in self._resumed.items()
            if late or now - since <= RESUME_AGAIN_S
        ]
        held = {(p.topic, p.partition) for p in self.held(waiting)}
        again = [p for p in waiting if (p.topic, p.partition) not in held]
        if again:
            consumer.resume(again)
            # Said once an input partition: its state was restored over a minute ago and
            # none of its messages read since (an idle one, with none to read, too).
            unread = [
                (p.topic, p.partition)
                for p in again
                if now - self._resumed[(p.topic, p.partition)] > RESUME_AGAIN_S
                and not self.is_backfill(p.topic)
                and (p.topic, p.partition) not in self._said
            ]
            if unread:
                self._said.update(unread)
                log.info(
                    "resumed again %d partitions none of whose messages was read in the %d s "
                    "since their restore (or that have none to read), such as %s[%d]",
                    len(unread),
                    RESUME_AGAIN_S,
                    *unread[0],
                )

    def close(self) -> None:
        """Release the restore consumers."""
        self._restorer.close()


def lag_of(position: int, committed: int, low: int, high: int) -> int:
    """Records of a partition not read yet: from its position, or for a partition not read
    since it was assigned, from its committed offset (the earliest when none: the data
    plane reads from the start). A partition never read counted as caught up before."""
    start = position if position >= 0 else committed if committed >= 0 else max(low, 0)
    return max(0, high - start)
