"""The processor, Faust's own clients included, and the sink work against a Kafka broker
that speaks TLS only, with a private CA and client certificates.

Tansu cannot serve TLS from its command line (README, Security), so the broker runs on
a loopback port that no client is told of, advertising a TLS terminator's address
(``tests/tls_terminator.py``): every client learns only that address, and it takes TLS
with a certificate of the private CA, or nothing. Debezium keeps writing to the
session's plaintext broker; the test copies this table's change events, as they are,
to the TLS broker, where the pipeline under test reads them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from processor.snapshot.client import send_signal
from tests.certificates import Authority
from tests.integration.processes import (
    Processor,
    SinkProcess,
    final_rows,
    pipeline_config,
    reconciled,
    wait_for,
)
from tests.integration.test_sink import assert_equal, sink_config
from tests.integration.test_snapshots import leading, notified, source_rows, uncaptured_table
from tidemark.cli.verify import processor_lag, source_lsn, wait_debezium
from tidemark.core.config import Config
from tidemark.core.kafka import client_config, exact_end_offsets
from tidemark.core.ports import free_port
from tidemark.devstack.broker import broker_binary
from tidemark.devstack.stack import DevStack

TABLE = "iso_tls_t"
TERMINATOR = Path(__file__).parents[1] / "tls_terminator.py"


@dataclasses.dataclass(frozen=True)
class TlsBroker:
    """The pipeline's configuration on the TLS broker, and what the test checks it with."""

    config: Config
    terminator_log: Path
    rogue_ca: Path


@pytest.fixture(scope="module")
def tls_broker(stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    folder = tmp_path_factory.mktemp("kafka-tls")
    ca, rogue = Authority(folder, "private"), Authority(folder, "rogue")
    server = ca.issue("broker", ips=("127.0.0.1",))
    client = ca.issue("tidemark")
    hidden, advertised = free_port(), free_port()
    stack.start_process(
        "tls-broker",
        [
            str(broker_binary()),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{hidden}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{advertised}",
            "--storage-engine",
            "memory://tansu/",
        ],
    )
    stack.start_process(
        "tls-terminator",
        [
            sys.executable,
            str(TERMINATOR),
            *("--listen", str(advertised), "--target", str(hidden)),
            *("--cert", str(server.cert), "--key", str(server.key), "--ca", str(ca.cert)),
        ],
    )
    base = pipeline_config(stack, "tls", batch_size=500)
    tls = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca.cert),
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
    }
    kafka = dataclasses.replace(
        base.kafka, bootstrap_servers=f"127.0.0.1:{advertised}", client_properties=tls
    )
    config = dataclasses.replace(base, kafka=kafka)
    try:
        wait_for("the TLS broker", lambda: answers(config.kafka.bootstrap_servers, tls), 60)
        yield TlsBroker(config, stack.run_dir / "tls-terminator.log", rogue.cert)
    finally:
        stack.stop_process("tls-terminator")
        stack.stop_process("tls-broker")


def answers(bootstrap: str, properties: dict[str, str], timeout: float = 3) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **properties})
    try:
        admin.list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


class Mirror:
    """Copies one topic of the session's broker to the TLS broker: same partitions, keys,
    values, headers and timestamps, in order."""

    def __init__(self, source: Config, target: Config, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            client_config(source.kafka, **{"group.id": "tests-mirror", "enable.auto.commit": False})
        )
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.copied = dict.fromkeys(partitions, 0)
        admin = AdminClient(client_config(target.kafka))
        for future in admin.create_topics([NewTopic(topic, len(partitions), 1)]).values():
            future.result(30)
        self.producer = Producer(client_config(target.kafka, **{"enable.idempotence": True}))

    def sync(self) -> int:
        """Copy what was added since the last call; how many records."""
        tps = [TopicPartition(self.topic, p) for p in self.copied]
        ends = exact_end_offsets(self.consumer, tps)
        count = 0
        for partition, start in self.copied.items():
            end = ends[(self.topic, partition)]
            if end <= start:
                continue
            self.consumer.assign([TopicPartition(self.topic, partition, start)])
            position = start
            while position < end:
                msg = self.consumer.poll(10)
                assert msg is not None and msg.error() is None, msg and msg.error()
                self.producer.produce(
                    self.topic,
                    msg.value(),
                    msg.key(),
                    partition=partition,
                    headers=msg.headers(),
                    timestamp=msg.timestamp()[1],
                )
                position = (msg.offset() or 0) + 1
                count += 1
            self.copied[partition] = position
        assert self.producer.flush(30) == 0
        return count

    def close(self) -> None:
        self.consumer.close()


def settle(stack: DevStack, config: Config, mirror: Mirror) -> None:
    """Every source change so far reached the TLS broker and went through the processor."""
    wait_debezium(stack.config, source_lsn(stack.config))
    mirror.sync()
    wait_for("the processor over TLS", lambda: not any(processor_lag(config).values()))


def test_the_pipeline_runs_on_a_tls_only_broker_with_client_certificates(
    stack: DevStack, tls_broker: TlsBroker, spark: object
) -> None:
    config = tls_broker.config
    uncaptured_table(config, TABLE, 400)  # rows 1..400 for the backfill, row 0 streamed
    wait_debezium(stack.config, source_lsn(stack.config))
    topic = f"{config.source.topic_prefix}.public.{TABLE}"
    mirror = Mirror(stack.config, config, topic)
    processor = Processor(stack, config, "tls-processor")
    try:
        assert mirror.sync() >= 1
        processor.start()
        wait_for("the coordinator", lambda: leading(processor))
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{TABLE}"]}, "tls-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "tls-1"), 180)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE public.{TABLE} SET v = v + 1 WHERE id % 3 = 0")  # noqa: S608
            conn.execute(f"DELETE FROM public.{TABLE} WHERE id % 10 = 1")  # noqa: S608
        settle(stack, config, mirror)
        assert final_rows(reconciled(config, TABLE)) == source_rows(config, TABLE)
    finally:
        processor.stop()
        mirror.close()

    settings = sink_config(config, "tlscat", [TABLE])
    sink = SinkProcess(stack, settings, "tls-sink").start("--once")
    assert sink.wait(300) == 0, sink.log.read_text()[-3000:]
    from spark_sink.session import create_session

    assert_equal(settings, create_session(settings), TABLE)

    # Who came through the terminator: librdkafka (the data plane, the coordinator, the
    # sink) and aiokafka (Faust's consumer and producer), each with the client certificate.
    accepted = re.findall(
        r"accepted: cn=(\S*) client_id=(\S+)", tls_broker.terminator_log.read_text()
    )
    assert {cn for cn, _ in accepted} == {"tidemark"}
    clients = {client for _, client in accepted}
    assert "rdkafka" in clients, clients
    assert any(c.startswith("faust") for c in clients), clients


def test_the_tls_broker_refuses_plaintext_another_ca_and_no_client_certificate(
    tls_broker: TlsBroker,
) -> None:
    config = tls_broker.config
    bootstrap, good = config.kafka.bootstrap_servers, config.kafka.client_properties
    assert answers(bootstrap, good)
    assert not answers(bootstrap, {})
    assert not answers(bootstrap, {**good, "ssl.ca.location": str(tls_broker.rogue_ca)})
    anonymous = {
        k: v for k, v in good.items() if k not in ("ssl.certificate.location", "ssl.key.location")
    }
    assert not answers(bootstrap, anonymous)
