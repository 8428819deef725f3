"""The Faust application that hosts the processor.

Faust is the frame: worker lifecycle, signal handling, the web server
(``/health``, ``/metrics``, the management API of :mod:`processor.api` and the
console of :mod:`processor.console`, behind :mod:`processor.web.guard`). The
change-topic data plane runs beside it in a thread (:mod:`processor.dataplane.loop`)
because Faust's per-event stream path is far slower than a librdkafka batch
loop. If the data plane fails, the worker stops with a non-zero exit code so
that the orchestrator restarts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import faust
from confluent_kafka import KafkaException
from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import CredentialsT
from faust.web import Request, Response, View
from mode import Service
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY

from processor.api import MAX_BODY_BYTES, instance_status, register_api
from processor.console.views import register_console
from processor.dataplane.loop import DataPlane
from processor.history import INTERVAL_S, History
from processor.metrics_detail import exposition
from processor.openapi import PREFIX
from processor.pipeline.audit import AuditWriter
from processor.pipeline.instances import REPORT_EVERY_S, Reporter
from processor.snapshot import slot_watch
from processor.snapshot.coordinator import Coordinator
from processor.snapshot.postgres.connector import PostgresConnector
from processor.snapshot.slot_watch import WATCH_EVERY_S
from processor.web.audit_trail import audited
from processor.web.guard import FailureLimit, Tokens, guard
from processor.web.sessions import Sessions
from state.rocksdb import RocksDBBackend
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka_aio import aiokafka_settings
from tidemark.core.ports import claim_port
from tidemark.core.record_auth import KEY_ENV, record_keys

log = logging.getLogger(__name__)


class Loop(Protocol):
    """A blocking loop with its own Kafka clients: the data plane or the snapshot coordinator."""

    failure: BaseException | None

    def run(self) -> None: ...

    def stop(self) -> None: ...


class LoopService(Service):
    """Runs a :class:`Loop` in a thread for as long as the worker runs."""

    def __init__(self, loop: Loop, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.loop_ = loop
        self.thread_name = name
        self._thread: threading.Thread | None = None

    async def on_start(self) -> None:
        """Start the loop thread."""

        def target() -> None:
            self.loop_.run()
            if self.loop_.failure is not None:
                # Stop the whole worker the way an operator would; run_worker then
                # exits non-zero so that the orchestrator restarts the process.
                os.kill(os.getpid(), signal.SIGTERM)

        self._thread = threading.Thread(target=target, name=self.thread_name, daemon=True)
        self._thread.start()

    async def on_stop(self) -> None:
        """Let the work in flight (a batch, a chunk) finish, then join the thread."""
        self.loop_.stop()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 30)


class ReportService(Service):
    """Reports this instance to the pipeline's instances topic, and that it stopped when it
    stops (:mod:`processor.pipeline.instances`). A report Kafka does not take is logged and
    tried again at the next one: reporting never stops the worker."""

    def __init__(self, config: Config, status: Callable[[], dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._config, self._status = config, status
        self._reporter: Reporter | None = None

    @Service.timer(REPORT_EVERY_S)
    async def _report(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._report_now)

    async def on_stop(self) -> None:
        if self._reporter is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._say_stopped)

    def _report_now(self) -> None:
        try:
            if self._reporter is None:
                self._reporter = Reporter(self._config)
            self._reporter.report(self._status())
        except (TidemarkError, KafkaException) as exc:
            log.warning("this instance's report was not written: %s", exc)

    def _say_stopped(self) -> None:
        assert self._reporter is not None
        try:
            self._reporter.close()
        except (TidemarkError, KafkaException) as exc:
            log.warning("this instance's last report was not written: %s", exc)


def faust_credentials(properties: Mapping[str, str]) -> CredentialsT | None:
    """Faust's credentials for ``kafka.client_properties`` (:mod:`tidemark.core.kafka_aio`)."""
    settings = aiokafka_settings(properties)
    protocol, context = settings["security_protocol"], settings.get("ssl_context")
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return SSLCredentials(context)
    return SASLCredentials(
        username=settings["sasl_plain_username"],
        password=settings["sasl_plain_password"],
        mechanism=settings["sasl_mechanism"],
        ssl_context=context,
    )


def create_app(config: Config) -> tuple[faust.App, DataPlane, Coordinator]:
    """The Faust app and its data plane for ``config``."""
    pc = config.processor
    tokens = Tokens.read(os.environ)  # refuses tokens too short before anything starts
    if record_keys() is None:  # and a record key too short
        log.warning(
            "%s is not set: control and backfill records are neither signed nor checked, "
            "so write access to the pipeline's topics gives orders (see Security)",
            KEY_ENV,
        )
    limit = FailureLimit(pc.api_auth_failures_per_minute)
    # with no operator's token nothing is served, and a random key accepts no cookie
    sessions = Sessions(tokens.operator or secrets.token_hex(32), tokens.viewer)
    app = faust.App(
        pc.pipeline,
        broker=[f"kafka://{s.strip()}" for s in config.kafka.bootstrap_servers.split(",")],
        store="memory://",
        web_enabled=True,
        web_application_options={
            "client_max_size": MAX_BODY_BYTES,
            "middlewares": [
                guard(tokens, limit, served=PREFIX + "/", sessions=sessions),
                audited(AuditWriter(config), served=PREFIX + "/"),  # inside the guard
            ],
        },
        # Faust's own views (router, tables, statistics, graph): not served at all.
        web_router_enabled=False,
        web_tables_enabled=False,
        web_stats_enabled=False,
        web_graph_enabled=False,
        web_metrics_enabled=False,
        web_bind=pc.web_host,
        web_port=pc.web_port,
        web_host=pc.web_host,
        broker_credentials=faust_credentials(config.kafka.client_properties),
        broker_session_timeout=config.kafka.session_timeout_ms / 1000,
        broker_heartbeat_interval=config.kafka.heartbeat_interval_ms / 1000,
        broker_max_poll_interval=config.kafka.max_poll_interval_ms / 1000,
        topic_partitions=config.kafka.topic_partitions,
        topic_replication_factor=config.kafka.replication_factor,
        autodiscover=False,
    )
    dataplane = DataPlane(
        config, RocksDBBackend(pc.state_dir, pc.state_cache_mb << 20, pc.state_memory_mb << 20)
    )
    # The source's connector: the one place a database kind is chosen.
    connector = PostgresConnector(config)
    coordinator = Coordinator(config, connector, dataplane.reconciler.schemas)

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            text = exposition(REGISTRY, pc.metrics_detail)
            return self.bytes(text, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/health")
    class Health(View):
        async def get(self, request: Request) -> Response:
            healthy = (
                dataplane.running and dataplane.failure is None and coordinator.failure is None
            )
            body: dict[str, Any] = {
                "status": "ok" if healthy else "failing",
                # running, paused or stopped (by the pipeline's lifecycle, or for good)
                "dataplane": dataplane.lifecycle.value.lower() if dataplane.running else "stopped",
                "assigned_partitions": len(dataplane.assigned),
                "snapshots": coordinator.role,
            }
            if coordinator.refused is not None:
                body["snapshots_refused"] = coordinator.refused
            # Kafka not answering is ridden out (processor.outages): said, still healthy.
            waiting = {
                name: outage.reason
                for name, outage in (
                    ("dataplane", dataplane.outage),
                    ("snapshots", coordinator.outage),
                )
                if outage.reason is not None
            }
            if waiting:
                body["waiting"] = waiting
            return self.json(body, status=200 if healthy else 503)

    history = History()

    @app.timer(interval=INTERVAL_S)
    async def sample_history() -> None:
        history.sample()

    async def watch_slot() -> None:
        slot = config.source.replication_slot
        await asyncio.get_running_loop().run_in_executor(
            None, slot_watch.watch, slot, connector.slot_state
        )

    app.task(watch_slot)  # at start, then every WATCH_EVERY_S
    app.timer(interval=WATCH_EVERY_S)(watch_slot)

    register_api(app, config, dataplane, coordinator, connector, history)
    register_console(app, pc.pipeline, tokens, limit, sessions)
    return app, dataplane, coordinator


def run_worker(config: Config) -> int:
    """Run the processor until SIGTERM/SIGINT; exit code non-zero if the data plane failed."""
    claim_port(config.processor.web_port, "processor's web server", config.processor.web_host)
    app, dataplane, coordinator = create_app(config)
    # The loops are the worker's services, which start before the app: their group joins
    # run beside Faust's own instead of after it (each join waits about 3 s here).
    loops = (LoopService(dataplane, "dataplane"), LoopService(coordinator, "snapshots"))
    pipeline = config.processor.pipeline
    reports = ReportService(config, lambda: instance_status(pipeline, dataplane, coordinator))
    worker = faust.Worker(app, *loops, reports, loglevel="info")

    def failed() -> bool:
        return dataplane.failure is not None or coordinator.failure is not None

    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        return 1 if failed() else code
    return 1 if failed() else 0
