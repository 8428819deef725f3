"""Consumers made by :func:`tidemark.core.kafka.consumer_config` keep fetching through a backlog.

The broker here answers a fetch with a whole partition's batches, and librdkafka counts
them against its prefetch queue (``queued.max.messages.kbytes``) far above their size.
With librdkafka's default ``fetch.queue.backoff.ms`` (1 s) a consumer over that limit
stopped fetching for a second at a time while it had little left to hand out: the
backfill's data plane waited in ``consume`` for about 40 % of a backfill, and a bare
consumer of the backfill topic read 40,000 records/s against 160,000 without the pauses
(``bench/backfill.py``). librdkafka's fetch log says how long each pause is.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tidemark.core.kafka import client_config, consumer_config, ensure_topics, producer_config
from tidemark.devstack.stack import DevStack

#: Records of 4 kB (Debezium JSON with schemas is 2 to 3.5 kB): 120 MB, over the queue's 64 MB.
RECORDS = 30_000


class _FetchLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_consumer_never_pauses_its_fetches_for_long_while_it_reads_a_backlog(
    stack: DevStack,
) -> None:
    config = stack.config
    topic = f"fetch{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    producer = Producer(
        producer_config(config.kafka, **{"linger.ms": 20, "compression.type": "lz4"})
    )
    row = b"x" * 4000
    for i in range(RECORDS):
        producer.produce(topic, b'{"id":%d,"v":"%s"}' % (i, row), b'{"id":%d}' % i)
        if i % 5_000 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0

    handler = _FetchLog()
    logger = logging.getLogger(f"rdkafka.{topic}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer(
        consumer_config(config.kafka, f"{topic}-group", debug="fetch"), logger=logger
    )
    try:
        consumer.subscribe([topic])
        read = 0
        while not read:
            read += len(consumer.consume(1, 10.0))
        # The first fetch may bring the whole backlog, and a reader that drains it at once
        # can empty the queue before the fetcher looks at it again. Holding off for longer
        # than a fetch's long poll (500 ms) makes the fetcher decide against a full queue.
        time.sleep(1.5)
        while read < RECORDS:
            # the consumer's logs reach the handler from its poll calls
            read += len(consumer.consume(5000, 10.0))
    finally:
        consumer.close()
        logger.removeHandler(handler)
    pauses = [
        int(found.group(1))
        for line in handler.lines
        if (found := re.search(r"Fetch backoff for (\d+)ms: Local: Queue full", line))
    ]
    assert pauses, "the backlog never filled the prefetch queue: the test proves nothing"
    assert max(pauses) <= 100, f"fetches paused for {max(pauses)} ms with a backlog waiting"
