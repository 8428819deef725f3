"""Configuration loading: defaults, overrides and the errors a user sees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.core.config import Config, load_config
from tidemark.core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    """``text`` as a configuration file readable by its owner alone (it may hold secrets)."""
    path = tmp_path / "tidemark.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={}) == Config()


def test_file_values_and_environment_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "kafka:\n  bootstrap_servers: k:9092\nprocessor:\n  batch_size: 10\n")
    config = load_config(
        path,
        environ={
            "TIDEMARK_PROCESSOR__BATCH_SIZE": "20",
            "TIDEMARK_SOURCE__PASSWORD": "0123",
            "TIDEMARK_SOURCE__TABLES": "[public.a, public.b]",
        },
    )
    assert config.kafka.bootstrap_servers == "k:9092"
    assert config.processor.batch_size == 20
    assert config.source.password == "0123"  # a secret stays text, leading zero and all
    assert config.source.tables == ["public.a", "public.b"]


def test_password_is_not_in_repr(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "source:\n  password: hunter2\n"), environ={})
    assert config.source.password == "hunter2"
    assert "hunter2" not in repr(config)


def test_the_catalog_password_comes_from_the_environment_and_stays_out_of_repr(
    tmp_path: Path,
) -> None:
    text = "sink:\n  catalog_type: jdbc\n  catalog_uri: jdbc:postgresql://db/iceberg\n"
    environ = {"TIDEMARK_SINK__CATALOG_PASSWORD": "007"}
    config = load_config(write(tmp_path, text), environ=environ)
    assert config.sink.catalog_password == "007"
    assert "007" not in repr(config)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kafka: [1, 2]\n", "kafka: expected a mapping, got list"),
        ("kafka:\n  bootstrap_server: x\n", "kafka: unknown key 'bootstrap_server'"),
        (
            "processor:\n  batch_size: many\n",
            "processor.batch_size: expected an integer, got 'many'",
        ),
        ("processor:\n  batch_size: 0\n", "processor.batch_size: must be greater than 0"),
        ("kafka:\n  max_record_bytes: 1048576\n", "kafka.max_record_bytes: must be at least"),
        (
            "processor:\n  envelope: debezium-ish\n",
            "processor.envelope: 'debezium-ish' is not one of",
        ),
        ("processor:\n  web_port: 70000\n", "processor.web_port: 70000 is not a port number"),
        ("sink:\n  topic_pattern: '('\n", "sink.topic_pattern: not a valid regular expression"),
        ("source:\n  topic_prefix: 'a.b'\n", "source.topic_prefix: use letters"),
        ("sink:\n  catalog_type: jdbc\n", "sink.catalog_uri: a jdbc catalog needs its URI"),
        ("sink:\n  catalog_type: unity\n", "sink.catalog_type: 'unity' is not one of"),
        (
            "sink:\n  catalog_type: hive\n  catalog_uri: http://hms:9083\n",
            "sink.catalog_uri: a hive catalog's URI names the Hive metastore",
        ),
        (
            "sink:\n  catalog_type: glue\n  catalog_uri: https://glue.example\n",
            "sink.catalog_uri: a glue catalog takes no URI (glue.endpoint",
        ),
        ("sink:\n  catalog_type: custom\n", "sink.catalog_properties: a custom catalog needs"),
        (
            "sink:\n  catalog_type: hive\n  catalog_uri: thrift://hms:9083\n  catalog_user: u\n",
            "sink.catalog_user: a hive catalog takes no user (jdbc and rest do)",
        ),
        (
            "sink:\n  catalog_type: jdbc\n  catalog_uri: jdbc:postgresql://db/x\n"
            "  catalog_properties:\n    catalog-impl: com.example.C\n",
            "sink.catalog_properties.catalog-impl: only with catalog_type: custom (Iceberg "
            "refuses a jdbc catalog with a catalog-impl too",
        ),
        (
            "sink:\n  catalog_type: nessie\n  catalog_uri: https://nessie/api/v2\n"
            "  catalog_properties:\n    authentication.token: t\n",
            "sink.catalog_properties.authentication.token: set it with sink.catalog_password",
        ),
        (
            "sink:\n  catalog_properties:\n    warehouse: /elsewhere\n",
            "sink.catalog_properties.warehouse: set it with sink.warehouse",
        ),
        ("sink:\n  catalog_name: 'lake; DROP'\n", "sink.catalog_name: use letters"),
        (
            "source:\n  debezium:\n    decimal.handling.mode: exact\n",
            "source.debezium.decimal.handling.mode: 'exact' is not one of precise",
        ),
        (
            "source:\n  debezium:\n    transforms: route\n"
            "    transforms.route.type: org.apache.kafka.connect.transforms.RegexRouter\n",
            "source.debezium.transforms.route.type: only io.debezium.transforms."
            "ExtractNewRecordState is supported",
        ),
        (
            "source:\n  debezium:\n    transforms: unwrap\n",
            "source.debezium.transforms.unwrap.type: missing",
        ),
        (
            "source:\n  debezium:\n    transforms: unwrap\n"
            "    transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState\n"
            "    transforms.unwrap.add.fields.prefix: meta_\n",
            "transforms.unwrap.add.fields.prefix: only the default '__' is supported",
        ),
        (
            "source:\n  debezium:\n    transforms.other.add.fields: op\n",
            "source.debezium.transforms: name the transforms (e.g. unwrap)",
        ),
        (
            "processor:\n  offsets_write_abandoned_s: 3\n",
            "processor.offsets_write_abandoned_s: at least 6",
        ),
        (
            "processor:\n  state_cache_mb: -1\n",
            "processor.state_cache_mb: must be 0 (no cache) or more",
        ),
        (
            "processor:\n  state_memory_mb: 8\n",
            "processor.state_memory_mb: at least 16",
        ),
        (
            "kafka:\n  fetch_wait_max_ms: 60000\n",
            "kafka.fetch_wait_max_ms: at most socket.timeout.ms (60000) less 1000",
        ),
        (
            "sink:\n  orphan_file_age_hours: 1\n",
            "sink.orphan_file_age_hours: 0 (keep orphan files) or at least 24",
        ),
        ("sink:\n  maintain_interval_s: -1\n", "sink.maintain_interval_s: must be 0 or more"),
        ("kafka: {bootstrap_servers: [\n", "not valid YAML"),
        ("- just\n- a list\n", "the top level must be a mapping"),
    ],
)
def test_invalid_files_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write(tmp_path, text), environ={})


def test_an_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml", environ={})


def test_default_input_pattern_takes_change_topics_only() -> None:
    pattern = re.compile(Config().input_pattern())
    assert pattern.match("tidemark.public.orders")
    for topic in (
        "tidemark.reconciled.public.orders",
        "tidemark.public.debezium_signal",
        "tidemark.public.tidemark_signal",
        "tidemark.public.tidemark_heartbeat",
        "__debezium-heartbeat.tidemark",
        "tidemark.dlq",
        "other.public.orders",
    ):
        assert not pattern.match(topic), topic


def test_the_flattening_transform_reaches_the_connector_as_given(tmp_path: Path) -> None:
    text = (
        "source:\n  debezium:\n    transforms: unwrap\n"
        "    transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState\n"
        "    transforms.unwrap.add.fields: op,txId,lsn\n"
        "    transforms.unwrap.delete.tombstone.handling.mode: rewrite\n"
    )
    properties = load_config(write(tmp_path, text), environ={}).source.value_settings().properties()
    assert properties["transforms"] == "unwrap"
    assert properties["transforms.unwrap.add.fields"] == "op,txId,lsn"
    assert properties["transforms.unwrap.delete.tombstone.handling.mode"] == "rewrite"
    assert properties["decimal.handling.mode"] == "precise"


def test_a_file_that_holds_a_secret_must_be_private(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  password: hunter2\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="holds source.password and is readable by others"):
        load_config(path, environ={})
    path.chmod(0o600)
    assert load_config(path, environ={}).source.password == "hunter2"
    public = write(tmp_path, "source:\n  user: reader\n")
    public.chmod(0o644)  # no secret in it: anyone may read it
    assert load_config(public, environ={"TIDEMARK_SOURCE__PASSWORD": "x"}).source.password == "x"
