"""Real components, started once per test session: broker, PostgreSQL, Debezium, processor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.integration.processes import Processor
from tidemark.core.config import Config, ProcessorConfig, SinkConfig
from tidemark.core.ports import free_port
from tidemark.devstack.stack import DevStack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The shared processor's input: every change topic but the signal, heartbeat and ``iso_*``
#: tables, which tests give to processors of their own (``processes.pipeline_config``).
SHARED_INPUT = (
    r"^tidemark\.public\.(?!(?:debezium_signal|tidemark_signal|tidemark_heartbeat)$)(?!iso_)[^.]+$"
)
SHARED_OUTPUT = r"^tidemark\.reconciled\.public\.(?!iso_)[^.]+$"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """A development stack with Debezium streaming; stopped at the end of the session."""
    run_dir = tmp_path_factory.mktemp("stack")
    base = Config(
        processor=ProcessorConfig(
            web_port=free_port(),
            state_dir=str(run_dir / "state"),
            input_pattern=SHARED_INPUT,
        ),
        sink=SinkConfig(
            warehouse=str(run_dir / "warehouse"), topic_pattern=SHARED_OUTPUT, metrics_port=0
        ),
    )
    dev = DevStack(run_dir, base)
    dev.up()
    try:
        yield dev
    finally:
        dev.down()


@pytest.fixture(scope="session")
def processor(stack: DevStack) -> Iterator[int]:
    """A running ``tidemark process`` on the stack's configuration; yields its web port."""
    shared = Processor(stack, stack.config, "processor").start()
    try:
        yield stack.config.processor.web_port
    finally:
        shared.stop()


@pytest.fixture(scope="session")
def spark(stack: DevStack) -> Iterator[SparkSession]:
    """One Spark session for the in-process sinks of every test (each adds its own catalog)."""
    from spark_sink.session import create_session, stop_session

    session = create_session(stack.config)
    try:
        yield session
    finally:
        stop_session(session)
