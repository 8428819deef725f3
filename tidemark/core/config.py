"""Configuration: one YAML file, ``TIDEMARK_<SECTION>__<FIELD>`` overrides, validated at start.

Every section is a frozen dataclass. Unknown keys, wrong types and out-of-range
values are refused with a message that names the offending field, so a typo
never silently falls back to a default. Secrets (``source.password``) are kept
out of ``repr`` and so out of logs; in production they come from the
environment (``TIDEMARK_SOURCE__PASSWORD``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from tidemark.core import topics
from tidemark.core.catalogs import catalog_problem
from tidemark.core.debezium_settings import ValueSettings
from tidemark.core.errors import ConfigError
from tidemark.core.kafka_aio import check_translatable
from tidemark.core.partitioners import Partitioner

ENV_PREFIX = "TIDEMARK_"
DEFAULT_CONFIG_PATH = "tidemark.yaml"
#: The processor API's bearer token: an environment variable only, never a file or a flag.
TOKEN_ENV = "TIDEMARK_API_TOKEN"  # noqa: S105 - the variable's name, not a secret
#: A read-only token for the API (and the console): its writes are answered 403.
VIEWER_TOKEN_ENV = "TIDEMARK_VIEWER_TOKEN"  # noqa: S105 - the variable's name
#: During a rotation, the tokens that take over: accepted beside the current ones.
NEXT_TOKEN_ENV = "TIDEMARK_API_TOKEN_NEXT"  # noqa: S105 - the variable's name
NEXT_VIEWER_TOKEN_ENV = "TIDEMARK_VIEWER_TOKEN_NEXT"  # noqa: S105 - the variable's name

#: The least ``kafka.max_record_bytes`` can be.
MIN_RECORD_BYTES = 16 * 1024 * 1024

Envelope = Literal["upsert", "debezium-upsert", "debezium"]
SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
ENVELOPE_NAMES: tuple[str, ...] = typing.get_args(Envelope)
Watermarks = Literal["read-only", "signal-table"]
MetricsDetail = Literal["partition", "topic", "pipeline"]


@dataclass(frozen=True)
class KafkaConfig:
    """The Kafka cluster that carries change, reconciled and internal topics."""

    #: Kafka's brokers to connect to first: ``host:port``, several separated by commas.
    bootstrap_servers: str = "127.0.0.1:9092"
    #: Partitions of every topic Tidemark creates (output topics copy their input's count).
    topic_partitions: int = 3
    #: Replicas of every topic Tidemark creates (at most the brokers' count).
    replication_factor: int = 1
    #: Extra librdkafka properties for every client (for example SASL settings).
    client_properties: dict[str, str] = field(default_factory=dict)
    #: The largest record Tidemark writes (32 MiB): its producers' ``message.max.bytes`` and
    #: the ``max.message.bytes`` of the topics it creates. An input message above half of it
    #: (its output may carry the old row and the new) becomes a dead letter that refers to it.
    max_record_bytes: int = 32 * 1024 * 1024
    #: How long a reconciled topic keeps a delete's tombstone once compaction reached it
    #: (its ``delete.retention.ms``, 7 days): a sink, or one stopped table, that lags the
    #: topic by longer may never see the delete, and stops its table rather than keep the
    #: row (``docs: Sink, gaps``). Set it above the longest sink outage you plan for.
    output_delete_retention_ms: int = 7 * 24 * 3600 * 1000
    #: The least age of a reconciled record before compaction may replace it with a newer
    #: one of its key (its ``min.compaction.lag.ms``; 0 lets the cleaner take any record
    #: outside the active segment). Raise it for readers that want every version.
    output_min_compaction_lag_ms: int = 0
    #: How long backfill rows and snapshot signals wait in their topics for the data plane
    #: and the coordinator (their ``retention.ms``, 7 days; ``retention.bytes`` is set
    #: unlimited, so a cluster's size limit cannot take them sooner). A pipeline stopped
    #: or paused for longer, with a backfill's rows unread, loses them: backfill again.
    queue_retention_ms: int = 7 * 24 * 3600 * 1000
    #: How long the dead-letter topic keeps a dead letter (its ``retention.ms``, 14
    #: days). A dead letter is the input message whole: a row, which can be personal
    #: data, kept as long as this says, for an operator to read, mend and send again.
    dead_letter_retention_ms: int = 14 * 24 * 3600 * 1000
    #: How long the audit topic keeps a record of an operator's action (its
    #: ``retention.ms``, 400 days: a year of audits, and a month to read the last).
    audit_retention_ms: int = 400 * 24 * 3600 * 1000
    #: Consumer groups: a member that sends no heartbeat for ``session_timeout_ms``, or
    #: polls no batch for ``max_poll_interval_ms``, loses its partitions. Short, so that a
    #: dead instance's partitions move soon (and a group join does not wait minutes).
    session_timeout_ms: int = 6000
    #: How often a group member sends a heartbeat (ms); less than ``session_timeout_ms``.
    heartbeat_interval_ms: int = 1000
    #: The longest a member may take between two polls (ms); at least ``session_timeout_ms``.
    max_poll_interval_ms: int = 10000
    #: The longest the broker holds the data plane's fetch of partitions with nothing new
    #: (ms; Kafka's default). Kafka answers as soon as a record arrives; the embedded
    #: broker only when the time is up, so there an idle partition's next record waits
    #: up to this long. Shorter costs the broker more: every fetch asks every partition
    #: the instance holds (``bench/results/fetch_wait.json``).
    fetch_wait_max_ms: int = 500
    #: How long a loop rides out Kafka being unreachable before the process stops.
    outage_deadline_s: float = 600.0
    #: A rebalance of the data plane's or the coordinator's group that has not completed
    #: in this time is repaired (``tidemark.core.group_repair``: the embedded broker can lose a
    #: group's leader for good); 0 turns it off. A healthy rebalance ends within about two
    #: ``max_poll_interval_ms`` (a member finishes its batch, then the join waits for the
    #: rest), so the default is three.
    stuck_rebalance_s: float = 30.0
    #: Confluent-compatible schema registry of Avro topics; empty: Avro input is a dead letter.
    schema_registry_url: str = ""
    #: User of the registry's basic authentication; empty: none.
    schema_registry_user: str = ""
    #: Pass it as ``TIDEMARK_KAFKA__SCHEMA_REGISTRY_PASSWORD``; never logged.
    schema_registry_password: str = field(default="", repr=False)
    #: An ``https://`` registry signed by a private CA: that CA's certificate (PEM).
    schema_registry_ca: str = ""
    #: How long a schema id the registry answers 404 for is asked again (seconds) before
    #: its messages are dead letters: a follower of the registry that has not seen a new
    #: schema yet answers 404 too. Meanwhile the batch waits, as in an outage; keep it
    #: below ``outage_deadline_s``.
    schema_registry_unknown_after_s: float = 60.0


@dataclass(frozen=True)
class SourceConfig:
    """The captured PostgreSQL database and the Debezium topic prefix."""

    #: Host name or address of the source PostgreSQL server.
    host: str = "127.0.0.1"
    #: Port of the source PostgreSQL server.
    port: int = 5432
    #: The database whose tables are captured.
    dbname: str = "postgres"
    #: The role the processor connects as: it reads the captured tables (and writes
    #: ``snapshot.signal_table`` with ``signal-table`` watermarks).
    user: str = "postgres"
    #: That role's password: pass it as ``TIDEMARK_SOURCE__PASSWORD``; never logged.
    password: str = field(default="", repr=False)
    #: Debezium's ``topic.prefix``: change topics are ``<prefix>.<schema>.<table>``.
    topic_prefix: str = "tidemark"
    #: Captured tables as ``schema.table``; empty means every table of ``schemas``.
    tables: list[str] = field(default_factory=list)
    #: Captured schemas: the connector's ``schema.include.list`` (``tidemark dev`` starts its
    #: connector with it).
    schemas: list[str] = field(default_factory=lambda: ["public"])
    #: Debezium's replication slot (its ``slot.name``): its confirmed position tells
    #: what Debezium has written to Kafka (signal-table watermarks, ``tidemark verify``).
    replication_slot: str = "debezium"
    #: The connector's settings that change how values are encoded, by Debezium's own
    #: names (``decimal.handling.mode: string``); unset ones are the connector's defaults.
    #: Backfill rows follow them; ``tidemark dev`` starts its connector with them.
    debezium: dict[str, str] = field(default_factory=dict)
    #: How the change topics' producer put keys in partitions: ``murmur2`` (Kafka's
    #: default, Kafka Connect's), ``crc32`` (librdkafka's default, ``consistent_random``)
    #: or ``fnv1a``. Backfilled rows are produced with it; ``tidemark dev``'s bridge too.
    partitioner: Partitioner = "murmur2"
    #: TLS to the source, as libpq names it: ``disable``, ``allow``, ``prefer`` (libpq's
    #: default), ``require``, ``verify-ca`` or ``verify-full`` (the certificate is signed
    #: by ``sslrootcert`` and names the host). ``sslcert`` and ``sslkey``: a client
    #: certificate, for servers that ask for one (``clientcert`` in ``pg_hba.conf``).
    sslmode: SslMode = "prefer"
    #: The CA certificate (PEM file) that signs the server's, for ``verify-ca`` and ``verify-full``.
    sslrootcert: str = ""
    #: A client certificate (PEM file), for servers that ask for one.
    sslcert: str = ""
    #: The private key of ``sslcert`` (PEM file).
    sslkey: str = ""
    #: Every statement of the processor on the source ends after this long (a filter such
    #: as ``pg_sleep(600)`` aborts its table, never holds a reader).
    statement_timeout_ms: int = 300_000
    #: A lock the processor waits for longer (its chunk read behind an ``ALTER TABLE``)
    #: fails the read, which is tried again.
    lock_timeout_ms: int = 30_000
    #: How long a connection to the source may take to open (seconds) before it fails.
    connect_timeout_s: int = 10

    def value_settings(self) -> ValueSettings:
        """``debezium`` read and checked."""
        return ValueSettings.read(self.debezium)

    def conninfo(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect``."""
        tls = {"sslrootcert": self.sslrootcert, "sslcert": self.sslcert, "sslkey": self.sslkey}
        return {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": self.user,
            "password": self.password,
            "sslmode": self.sslmode,
            **{name: path for name, path in tls.items() if path},
        }

    def session(self, read_only: bool = True) -> dict[str, Any]:
        """:meth:`conninfo` for the processor's own connections: read-only for the whole
        session (but for the one that writes signal-table watermarks), with the timeouts,
        standard strings (the filter check reads quotes as PostgreSQL then does), and
        ``pg_catalog`` alone on the search path (every table is named with its schema)."""
        settings = {
            # only the catalog's functions, operators and types are found by a bare name:
            # a filter's `lower(x)` or `a = b` cannot reach one a user planted in public
            "search_path": "pg_catalog",
            "default_transaction_read_only": "on" if read_only else "off",
            "statement_timeout": self.statement_timeout_ms,
            "lock_timeout": self.lock_timeout_ms,
            "standard_conforming_strings": "on",
        }
        options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        return {**self.conninfo(), "options": options, "connect_timeout": self.connect_timeout_s}


@dataclass(frozen=True)
class ProcessorConfig:
    """The stream processor (``tidemark process``)."""

    #: Pipeline name: the Faust application id and the prefix of its consumer groups.
    pipeline: str = "tidemark"
    #: The envelope of every input topic not named in ``envelopes``.
    envelope: Envelope = "debezium-upsert"
    #: Envelope per source: ``schema.table`` (or a full topic name) to an envelope name.
    envelopes: dict[str, str] = field(default_factory=dict)
    #: Regular expression of input topics; default: every change topic of ``source.topic_prefix``.
    input_pattern: str = ""
    #: Folder of the processor's state: one RocksDB database (``@rocksdb``) that holds
    #: every input partition's, each restored from its changelog when missing.
    state_dir: str = ".tidemark/state"
    #: Memory for a cache of state values of the keys in use, shared by the partitions
    #: this instance holds (0: none). A change whose key changed recently then reads its
    #: stored value from memory, not RocksDB.
    state_cache_mb: int = 64
    #: Memory of the process's RocksDB database, which holds every partition's state:
    #: half for its block cache, half for its two write buffers.
    state_memory_mb: int = 128
    #: The labels of ``/metrics``: ``partition`` (every series), ``topic`` (a topic's
    #: partitions summed) or ``pipeline`` (no topic, partition or table label). An
    #: estate of hundreds of tables wants ``topic`` or ``pipeline``
    #: (:mod:`processor.metrics_detail`).
    metrics_detail: MetricsDetail = "partition"
    #: Address the web server binds: the management API, the console, ``/metrics`` and
    #: ``/health``; ``0.0.0.0`` where they are reached from outside (Kubernetes).
    web_host: str = "127.0.0.1"
    #: Port of the web server.
    web_port: int = 6066
    #: Failed API authentications a client may make in a minute; more are answered 429.
    api_auth_failures_per_minute: int = 20
    #: Key values are personal data: errors, status and logs leave them out. ``true``
    #: logs the key range of a backfill read that failed, to find its rows (the API
    #: shows key values to the operator's token only, whatever this says).
    log_key_values: bool = False
    #: Most rows a data-plane batch takes from Kafka, which bounds its memory: a record is
    #: a row, a backfill record frames up to 16
    #: (:data:`processor.events.chunk_records.ROWS_PER_RECORD`) and counts as 16.
    batch_size: int = 5000
    #: How long a data-plane batch waits (ms) for records that hold ``batch_size`` rows.
    batch_timeout_ms: int = 100
    #: The fused paths: compiled loops that decode and decide each envelope's common cases
    #: in one pass (:mod:`processor.reconcile.batch`). ``false`` decides every message on the
    #: general path (decode, then the envelope's rule): the same outputs and state, at a
    #: lower rate; a way to rule a fused loop out.
    fused_paths: bool = True
    #: A pending key's row is asked for again after this many seconds, then after twice as
    #: long each time, up to an hour, until it comes (a request can be refused or aborted).
    read_again_retry_s: float = 300.0
    #: An offsets write whose writer has not renewed it for this long (seconds) was left
    #: unfinished: one data plane claims it and completes it. Its writer renews it every
    #: sixth of this while it works.
    offsets_write_abandoned_s: float = 60.0


@dataclass(frozen=True)
class SnapshotConfig:
    """Incremental snapshots (backfills) run by the processor."""

    #: Rows per chunk at the start; adapted between the bounds to keep chunks near the target.
    chunk_size: int = 4096
    #: The fewest rows a chunk is adapted down to.
    min_chunk_size: int = 256
    #: The most rows a chunk is adapted up to.
    max_chunk_size: int = 16384
    #: The time a chunk's read should take (seconds): a chunk read in less than half of it
    #: doubles the next one, one that took more than twice halves it.
    chunk_target_seconds: float = 0.5
    #: A ceiling on rows read per second, to protect a busy source; 0: none.
    max_rows_per_second: int = 0
    #: Reader processes (each with a connection) reading parts of a table at once.
    readers: int = 1
    #: Tidemark's signal table in the source (``id``, ``type``, ``data``), read from its
    #: change topic; never Debezium's ``signal.data.collection``.
    signal_table: str = "public.tidemark_signal"
    #: How a chunk is placed against the change stream: ``read-only`` (PostgreSQL's
    #: ``pg_current_snapshot()``, exact, writes nothing) or ``signal-table`` (DDD-3's
    #: window-open and window-close rows written to ``signal_table``).
    watermarks: Watermarks = "read-only"
    #: How long a table waits for a source that cannot be reached (a restart, an outage)
    #: before its snapshot is aborted; meanwhile its status says why it waits.
    source_outage_deadline_s: float = 300.0


@dataclass(frozen=True)
class TableLayout:
    """How the sink lays out an Iceberg table: its partition spec, sort order, table
    properties and format version, and what it keeps (its mode, its metadata columns).
    For a table, each part comes from its entry in ``sink.tables`` unless left out
    (``null``) there, then from ``sink.layout``, then from the built-in default:
    unpartitioned, unsorted, format 2, ``merge`` (properties merge instead). A
    changed layout is applied to existing tables the way Iceberg evolves them (new data
    takes it; files already written keep theirs)."""

    #: Partition fields, each a column (identity) or one of Iceberg's transforms:
    #: ``bucket(16, id)``, ``truncate(4, name)``, ``year(ts)``, ``month(ts)``, ``day(ts)``,
    #: ``hour(ts)``. The MERGE matches rows on the key alone, so a row whose partition
    #: column changes moves to its new partition.
    partition_by: list[str] | None = None
    #: Sort order of the files the sink writes: columns, each optionally followed by
    #: ``asc`` or ``desc`` and ``nulls first`` or ``nulls last`` (``id``, ``ts desc``).
    sort_by: list[str] | None = None
    #: Iceberg table properties set on the table (``write.parquet.compression-codec``,
    #: ``write.target-file-size-bytes``, ...); a table's own entry adds to and overrides
    #: those of ``sink.layout``. ``format-version``, ``tidemark.*`` and Spark's own
    #: (``location``, ``owner``, ``comment``, ``provider``, ``external``) are refused.
    properties: dict[str, str] = field(default_factory=dict)
    #: Iceberg format version, 2 or 3 (deletion vectors for ``merge-on-read``); a table
    #: is upgraded, never downgraded.
    format_version: int | None = None
    #: What the table keeps: ``merge`` (each key's current row, the default) or
    #: ``append`` (every version, deletes included, with the metadata columns). A table
    #: keeps the mode it was made with: a changed mode stops it.
    mode: Literal["merge", "append"] | None = None
    #: Tidemark's metadata columns in a ``merge`` table too: ``tidemark_op``,
    #: ``tidemark_committed_at``, ``tidemark_lsn``, ``tidemark_txid``,
    #: ``tidemark_position`` and ``tidemark_ingested_at``. Once a table has them, it keeps
    #: them.
    metadata_columns: bool | None = None


@dataclass(frozen=True)
class SinkConfig:
    """The Spark job that merges reconciled topics into Iceberg (``tidemark sink``)."""

    #: The Iceberg catalog: ``hadoop`` (a warehouse folder; local disks only, it has no
    #: atomic commits on object stores), ``jdbc`` (tables listed in a database), ``rest``,
    #: ``hive`` or ``nessie`` (``catalog_uri`` names the service), ``glue`` (AWS's, from
    #: the environment's credentials), or ``custom`` (the class in ``catalog_properties``'
    #: ``catalog-impl``). :mod:`tidemark.core.catalogs` says what each takes.
    catalog_type: Literal["hadoop", "jdbc", "rest", "hive", "nessie", "glue", "custom"] = "hadoop"
    #: The catalog's name in Spark (``spark.sql.catalog.<name>``): the first part of every
    #: table's name (``<name>.<schema>.<table>``).
    catalog_name: str = "lake"
    #: ``jdbc:postgresql://host:port/db`` for ``jdbc``, ``http(s)://`` for ``rest`` and
    #: ``nessie``, ``thrift://`` for ``hive``; none for ``hadoop`` and ``glue``.
    catalog_uri: str = ""
    #: User of a ``jdbc`` catalog's database, or of a ``rest`` catalog's credential.
    catalog_user: str = ""
    #: A ``jdbc`` catalog's user's password, a ``rest`` client's secret (with
    #: ``catalog_user``) or bearer token (without), or a ``nessie`` bearer token. Pass it
    #: as ``TIDEMARK_SINK__CATALOG_PASSWORD``; never logged.
    catalog_password: str = field(default="", repr=False)
    #: Extra catalog properties (``spark.sql.catalog.<name>.<key>``), e.g. an ``io-impl``,
    #: a Nessie ``ref``, a ``custom`` catalog's ``catalog-impl``; not those the fields
    #: above set.
    catalog_properties: dict[str, str] = field(default_factory=dict)
    #: A folder or a URI. ``s3://bucket/path`` is written through Iceberg's ``S3FileIO``
    #: with the AWS SDK's credentials (``AWS_*`` variables, a container's role) and needs
    #: a catalog with atomic commits, not ``hadoop``; ``catalog_properties`` take its
    #: ``s3.endpoint`` and other ``s3.*`` settings.
    warehouse: str = ".tidemark/warehouse"
    #: Spark's master URL; ``local[N]`` runs Spark in the sink's process with N threads.
    spark_master: str = "local[2]"
    #: Reconciled topics by name; with ``topic_pattern``, the union of both.
    topics: list[str] = field(default_factory=list)
    #: Regular expression of reconciled topics; default (no ``topics`` either):
    #: ``<prefix>.reconciled.*``.
    topic_pattern: str = ""
    #: Most records read per topic-partition in one micro-batch.
    max_records_per_partition: int = 500_000
    #: A table that read all it found is merged again after this pause (seconds); one
    #: with records left goes again at once; ``--once`` does not wait.
    trigger_interval_s: float = 10.0
    #: Tables merged side by side, in one Spark driver; the stalest goes first.
    concurrent_tables: int = 4
    #: Seconds a read waits for a record before its table's batch is tried again.
    read_stall_s: float = 60.0
    #: Seconds a partition's last stable offset may stay still behind its newest records
    #: (a transaction left open) before the sink reads past it: the embedded broker never
    #: closes a transaction whose writer died. Twice Kafka's default transaction timeout.
    stuck_transaction_s: float = 120.0
    #: Deletes set ``tidemark_deleted`` and ``tidemark_deleted_at`` instead of removing rows.
    soft_delete: bool = False
    #: The layout of every table (a table's entry in ``tables`` overrides it).
    layout: TableLayout = field(default_factory=TableLayout)
    #: Layouts of single tables by ``<schema>.<table>``, each with the fields of
    #: ``sink.layout``: ``{"public.orders": {"partition_by": ["day(created_at)"]}}``.
    tables: dict[str, TableLayout] = field(default_factory=dict)
    #: A table whose unread records waited longer than its topic's ``delete.retention.ms``
    #: (compaction may have removed deletes it never saw) is made again from the whole
    #: topic, in one batch; ``false``: it stops with the reason.
    rebuild_on_gap: bool = True
    #: How new tables apply updates and deletes: ``merge-on-read`` writes position delete
    #: files (compacted by maintenance), whose MERGE costs a fraction of a rewrite on large
    #: tables; ``copy-on-write`` rewrites the data files they touch (readers merge nothing).
    write_mode: Literal["copy-on-write", "merge-on-read"] = "merge-on-read"
    #: Prometheus metrics of the driver on this port (0: none).
    metrics_port: int = 9108
    #: Loopback by default; ``0.0.0.0`` where Prometheus scrapes from outside (Kubernetes).
    metrics_host: str = "127.0.0.1"
    #: The long-running sink maintains each table at most this often (s), in the table's
    #: own turn between its rounds (so even on a ``hadoop`` catalog no commit meets
    #: another); 0: never (run ``tidemark sink maintain``).
    maintain_interval_s: float = 3600.0
    #: Maintenance: target size of compacted files, the fewest files worth a rewrite,
    #: and which snapshots to keep (the newest one with the offsets always stays).
    target_file_size_mb: int = 128
    #: Maintenance rewrites a group of small data or delete files only from this many on.
    min_input_files: int = 5
    #: Maintenance expires snapshots older than this (hours), never the newest that holds
    #: the sink's offsets.
    snapshot_retention_hours: float = 24.0
    #: Maintenance keeps this many newest snapshots, whatever their age.
    retain_last_snapshots: int = 5
    #: Maintenance deletes files no snapshot refers to once older than this (hours, at
    #: least 24): a writer's files have no snapshot until it commits, and a compaction of
    #: another process may run for hours. 0: orphan files are kept.
    orphan_file_age_hours: float = 72.0
    #: Extra Spark settings (``spark.*`` keys).
    spark_conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DevConfig:
    """The embedded development stack (``tidemark dev up``)."""

    #: Folder of the stack: its data, logs, ``stack.json`` and the ``tidemark.yaml`` it
    #: writes (``dev up --run-dir`` names another).
    run_dir: str = ".tidemark/run"
    #: 0 picks a free loopback port.
    broker_port: int = 0
    #: PostgreSQL's port; 0 picks a free loopback port.
    postgres_port: int = 0
    #: ``json`` (with schemas), ``json-schemaless``, or ``avro`` (Confluent wire format,
    #: schemas in a registry the stack starts).
    debezium_format: Literal["json", "json-schemaless", "avro"] = "json"
    #: How often the stack's Debezium sends a heartbeat and runs its heartbeat query (ms),
    #: so that its position moves on while the captured tables are idle.
    heartbeat_interval_ms: int = 1000
    #: The development cluster's owner (a superuser): what Debezium, the demo's workload and
    #: the tests connect as. The processor connects as ``source.user``, a role of its own
    #: that may only read the tables (and write Tidemark's signal table).
    owner_user: str = ""
    #: The owner's password (``dev up`` writes the cluster's); never logged.
    owner_password: str = field(default="", repr=False)


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    source: SourceConfig = field(default_factory=SourceConfig)
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    dev: DevConfig = field(default_factory=DevConfig)

    def owner_conninfo(self) -> dict[str, Any]:
        """``psycopg.connect`` arguments as the development cluster's owner (``dev``), or as
        ``source.user`` where no owner is configured."""
        info = self.source.conninfo()
        if self.dev.owner_user:
            info.update(user=self.dev.owner_user, password=self.dev.owner_password)
        return info

    def input_pattern(self) -> str:
        """The processor's input topics: ``<prefix>.<schema>.<table>``, never reconciled ones."""
        if self.processor.input_pattern:
            return self.processor.input_pattern
        return topics.input_pattern(self.source.topic_prefix)

    def envelope_of(self, topic: str) -> str:
        """The envelope of input ``topic`` (``<prefix>.<schema>.<table>``)."""
        chosen = self.processor.envelopes
        if topic in chosen:
            return chosen[topic]
        head = self.source.topic_prefix + "."
        table = topic[len(head) :] if topic.startswith(head) else topic
        return chosen.get(table, self.processor.envelope)

    def sink_pattern(self) -> str:
        """The sink's input topics by pattern (``""``: only those of ``sink.topics``)."""
        if self.sink.topic_pattern or self.sink.topics:
            return self.sink.topic_pattern
        return topics.output_pattern(self.source.topic_prefix)


_POSITIVE = {
    ("kafka", "topic_partitions"),
    ("kafka", "replication_factor"),
    ("kafka", "session_timeout_ms"),
    ("kafka", "heartbeat_interval_ms"),
    ("kafka", "max_poll_interval_ms"),
    ("kafka", "fetch_wait_max_ms"),
    ("kafka", "outage_deadline_s"),
    ("kafka", "dead_letter_retention_ms"),
    ("kafka", "audit_retention_ms"),
    ("source", "statement_timeout_ms"),
    ("source", "lock_timeout_ms"),
    ("source", "connect_timeout_s"),
    ("processor", "batch_size"),
    ("processor", "api_auth_failures_per_minute"),
    ("processor", "batch_timeout_ms"),
    ("processor", "read_again_retry_s"),
    ("snapshot", "chunk_size"),
    ("snapshot", "min_chunk_size"),
    ("snapshot", "max_chunk_size"),
    ("snapshot", "chunk_target_seconds"),
    ("snapshot", "source_outage_deadline_s"),
    ("sink", "max_records_per_partition"),
    ("sink", "trigger_interval_s"),
    ("sink", "concurrent_tables"),
    ("sink", "read_stall_s"),
    ("sink", "stuck_transaction_s"),
    ("sink", "target_file_size_mb"),
    ("sink", "min_input_files"),
    ("sink", "retain_last_snapshots"),
    ("dev", "heartbeat_interval_ms"),
}
_SECRETS = {"password", "schema_registry_password", "catalog_password", "owner_password"}
_PORTS = {
    ("source", "port"),
    ("processor", "web_port"),
    ("dev", "broker_port"),
    ("dev", "postgres_port"),
    ("sink", "metrics_port"),
}


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    required: bool = False,
) -> Config:
    """Read ``path`` (YAML), apply environment overrides and validate.

    A missing file at the default path gives the built-in defaults, unless
    ``required``; a missing file named explicitly is an error.
    """
    environ = os.environ if environ is None else environ
    explicit = path is not None
    file = Path(path if path is not None else DEFAULT_CONFIG_PATH)
    data: Any = {}
    if file.exists():
        try:
            data = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{file}: the top level must be a mapping of sections")
        _check_private(file, data)
    elif explicit or required:
        raise ConfigError(f"configuration file {file} does not exist")
    data = _apply_env(data, environ)
    config = _build(Config, data, "")
    _check_ranges(config)
    return config


def _check_private(file: Path, data: dict[str, Any]) -> None:
    """A file that holds a secret must be readable by its owner alone (mode 0600)."""
    held = [
        f"{section}.{key}"
        for section, fields in data.items()
        if isinstance(fields, dict)
        for key, value in fields.items()
        if key in _SECRETS and value
    ]
    mode = file.stat().st_mode & 0o777
    if held and mode & 0o077:
        raise ConfigError(
            f"{file} holds {', '.join(held)} and is readable by others (mode {mode:o}): "
            "chmod 600 it, or give secrets in the environment (TIDEMARK_SOURCE__PASSWORD, ...)"
        )


def dump_config(config: Config) -> str:
    """YAML text of ``config`` (secrets included: write it with mode 0600)."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False)


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{name}: section '{section}' is not a mapping")
        target[key] = raw if key in _SECRETS else _parse_scalar(raw)
    return merged


def _parse_scalar(raw: str) -> Any:
    """An override is read as a YAML scalar (``8``, ``true``, ``[a, b]``), else kept as text."""
    try:
        return yaml.safe_load(raw) if raw else raw
    except yaml.YAMLError:
        return raw


def _build(cls: type[Any], data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'configuration'}: expected a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"{where or 'configuration'}: unknown key '{unknown[0]}' "
            f"(known: {', '.join(sorted(known))})"
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _convert(hints[name], value, f"{where}.{name}" if where else name)
    return cls(**kwargs)


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(typing.cast(type, hint), value, where)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {_kind(value)}")
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_kind(value)}")
        _key, item = typing.get_args(hint)
        if item is str:
            return {str(k): str(v) for k, v in value.items()}
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) != 1 or len(typing.get_args(hint)) != 2:
            raise ConfigError(f"{where}: unsupported type")  # pragma: no cover - schema bug
        return None if value is None else _convert(options[0], value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{where}: expected a string, got {_kind(value)}")
        return str(value)
    raise ConfigError(f"{where}: unsupported type {hint!r}")  # pragma: no cover


def _check_ranges(config: Config) -> None:
    for section, key in _POSITIVE:
        if getattr(getattr(config, section), key) <= 0:
            raise ConfigError(f"{section}.{key}: must be greater than 0")
    for section, key in _PORTS:
        port = getattr(getattr(config, section), key)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{section}.{key}: {port} is not a port number")
    for name, pattern in (
        ("processor.input_pattern", config.processor.input_pattern),
        ("sink.topic_pattern", config.sink.topic_pattern),
    ):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{name}: not a valid regular expression: {exc}") from None
    for source, envelope in config.processor.envelopes.items():
        if envelope not in ENVELOPE_NAMES:
            raise ConfigError(
                f"processor.envelopes.{source}: {envelope!r} is not one of "
                + ", ".join(map(repr, ENVELOPE_NAMES))
            )
    config.source.value_settings()
    check_translatable(config.kafka.client_properties)
    kafka = config.kafka
    if not kafka.heartbeat_interval_ms < kafka.session_timeout_ms <= kafka.max_poll_interval_ms:
        raise ConfigError(
            "kafka: heartbeat_interval_ms < session_timeout_ms <= max_poll_interval_ms, "
            f"not {kafka.heartbeat_interval_ms}, {kafka.session_timeout_ms}, "
            f"{kafka.max_poll_interval_ms}"
        )
    socket_text = str(kafka.client_properties.get("socket.timeout.ms", "60000"))
    socket_ms = int(socket_text) if socket_text.isdigit() else 60000
    if kafka.fetch_wait_max_ms > socket_ms - 1000:  # librdkafka refuses the consumer
        raise ConfigError(
            f"kafka.fetch_wait_max_ms: at most socket.timeout.ms ({socket_ms}) less 1000, "
            f"not {kafka.fetch_wait_max_ms}"
        )
    if not 0 <= kafka.schema_registry_unknown_after_s < kafka.outage_deadline_s:
        raise ConfigError(
            "kafka.schema_registry_unknown_after_s: from 0 to below outage_deadline_s (a "
            "schema asked again for longer would stop the processor first), not "
            f"{kafka.schema_registry_unknown_after_s}"
        )
    if kafka.stuck_rebalance_s and kafka.stuck_rebalance_s * 1000 < 3 * kafka.max_poll_interval_ms:
        raise ConfigError(
            "kafka.stuck_rebalance_s: 0 (off) or at least 3 max_poll_interval_ms (a rebalance "
            f"may take that long), not {kafka.stuck_rebalance_s}"
        )
    if kafka.output_delete_retention_ms < 60_000 or kafka.output_min_compaction_lag_ms < 0:
        raise ConfigError(
            "kafka.output_delete_retention_ms: at least 60000 (a minute), and "
            "kafka.output_min_compaction_lag_ms: 0 or more"
        )
    if kafka.queue_retention_ms < 3_600_000 and kafka.queue_retention_ms != -1:
        raise ConfigError("kafka.queue_retention_ms: at least 3600000 (an hour), or -1 (forever)")
    if config.kafka.max_record_bytes < MIN_RECORD_BYTES:
        raise ConfigError(
            f"kafka.max_record_bytes: must be at least {MIN_RECORD_BYTES} (16 MiB): a full "
            "snapshot queue's progress record takes up to about 9 MB"
        )
    snap = config.snapshot
    if not snap.min_chunk_size <= snap.chunk_size <= snap.max_chunk_size:
        raise ConfigError("snapshot.chunk_size: must lie between min_chunk_size and max_chunk_size")
    if not 1 <= snap.readers <= 64:
        raise ConfigError("snapshot.readers: must be 1 to 64")
    if snap.max_rows_per_second < 0:
        raise ConfigError("snapshot.max_rows_per_second: must be 0 (no ceiling) or more")
    if not re.fullmatch(r"[^.\s]+\.[^.\s]+", snap.signal_table):
        raise ConfigError("snapshot.signal_table: expected 'schema.table'")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", config.source.topic_prefix):
        raise ConfigError("source.topic_prefix: use letters, digits, '_' and '-' only")
    sink = config.sink
    problem = catalog_problem(
        sink.catalog_type,
        sink.catalog_uri,
        sink.catalog_properties,
        sink.catalog_user,
        sink.warehouse,
    )
    if problem is not None:
        raise ConfigError(f"sink.{problem[0]}: {problem[1]}")
    if config.processor.offsets_write_abandoned_s < 6:
        # A claim waits 2 s for other claims and renews every sixth of this time.
        raise ConfigError("processor.offsets_write_abandoned_s: at least 6 (seconds)")
    if config.processor.state_cache_mb < 0:
        raise ConfigError("processor.state_cache_mb: must be 0 (no cache) or more")
    if config.processor.state_memory_mb < 16:
        raise ConfigError("processor.state_memory_mb: at least 16")
    for name in ("snapshot_retention_hours", "maintain_interval_s"):
        if getattr(sink, name) < 0:
            raise ConfigError(f"sink.{name}: must be 0 or more")
    if sink.orphan_file_age_hours and not sink.orphan_file_age_hours >= 24:
        raise ConfigError(
            "sink.orphan_file_age_hours: 0 (keep orphan files) or at least 24: a younger "
            "file may belong to a commit still being written"
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", sink.catalog_name):
        raise ConfigError("sink.catalog_name: use letters, digits and '_' only")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", config.processor.pipeline):
        raise ConfigError("processor.pipeline: use letters, digits, '_' and '-' only")


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
