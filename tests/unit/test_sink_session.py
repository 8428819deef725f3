"""The sink's catalog settings for each catalog type (no Spark started)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from spark_sink.session import catalog_secrets, catalog_settings, jvm_options, postgres_jar
from tidemark.core.catalogs import KINDS, catalog_problem
from tidemark.core.config import SinkConfig


def test_a_hadoop_catalog_on_a_folder_gets_an_absolute_warehouse() -> None:
    settings = catalog_settings(SinkConfig(warehouse="wh"))
    assert settings["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert settings["spark.sql.catalog.lake.type"] == "hadoop"
    assert settings["spark.sql.catalog.lake.warehouse"] == str(Path("wh").resolve())


def test_a_jdbc_catalog_carries_its_uri_and_credentials_and_keeps_a_uri_warehouse() -> None:
    sink = SinkConfig(
        catalog_type="jdbc",
        catalog_name="pg",
        catalog_uri="jdbc:postgresql://db:5432/iceberg",
        catalog_user="iceberg",
        catalog_password="secret",
        warehouse="s3://bucket/warehouse",
        catalog_properties={"io-impl": "org.apache.iceberg.aws.s3.S3FileIO"},
    )
    settings = catalog_settings(sink)
    assert settings["spark.sql.catalog.pg.type"] == "jdbc"
    assert settings["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://db:5432/iceberg"
    assert settings["spark.sql.catalog.pg.jdbc.user"] == "iceberg"
    # the password never reaches the builder (the JVM's command line), only the session
    assert "secret" not in str(settings)
    assert catalog_secrets(sink) == {"spark.sql.catalog.pg.jdbc.password": "secret"}
    assert settings["spark.sql.catalog.pg.warehouse"] == "s3://bucket/warehouse"
    assert settings["spark.sql.catalog.pg.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"


def test_a_nessie_catalog_writes_main_unless_told_and_its_token_is_a_secret() -> None:
    uri = "https://nessie.example/api/v2"
    sink = SinkConfig(catalog_type="nessie", catalog_uri=uri, catalog_password="tok")
    settings = catalog_settings(sink)
    assert settings["spark.sql.catalog.lake.type"] == "nessie"
    assert settings["spark.sql.catalog.lake.uri"] == uri
    assert settings["spark.sql.catalog.lake.ref"] == "main"
    assert settings["spark.sql.catalog.lake.authentication.type"] == "BEARER"
    assert "tok" not in str(settings)
    assert catalog_secrets(sink) == {"spark.sql.catalog.lake.authentication.token": "tok"}
    branch = SinkConfig(catalog_type="nessie", catalog_uri=uri, catalog_properties={"ref": "etl"})
    assert catalog_settings(branch)["spark.sql.catalog.lake.ref"] == "etl"
    assert "spark.sql.catalog.lake.authentication.type" not in catalog_settings(branch)


def test_a_custom_catalog_is_its_class_without_a_type_and_glue_needs_no_uri() -> None:
    impl = "org.example.OurCatalog"
    settings = catalog_settings(
        SinkConfig(catalog_type="custom", catalog_properties={"catalog-impl": impl})
    )
    assert settings["spark.sql.catalog.lake.catalog-impl"] == impl
    assert "spark.sql.catalog.lake.type" not in settings  # Iceberg refuses both
    glue = catalog_settings(SinkConfig(catalog_type="glue", warehouse="s3://lake/wh"))
    assert glue["spark.sql.catalog.lake.type"] == "glue"
    assert glue["spark.sql.catalog.lake.warehouse"] == "s3://lake/wh"
    assert "spark.sql.catalog.lake.uri" not in glue
    assert catalog_secrets(SinkConfig(catalog_type="glue", catalog_password="x")) == {}


def test_a_rest_catalog_takes_a_client_credential_or_a_bearer_token_and_a_named_warehouse() -> None:
    uri = "https://catalog.example.org/api/catalog"
    client = SinkConfig(
        catalog_type="rest", catalog_uri=uri, catalog_user="c", catalog_password="s"
    )
    assert catalog_secrets(client) == {"spark.sql.catalog.lake.credential": "c:s"}
    bearer = SinkConfig(catalog_type="rest", catalog_uri=uri, catalog_password="tok")
    assert catalog_secrets(bearer) == {"spark.sql.catalog.lake.token": "tok"}
    # a REST catalog's warehouse may be a name the service knows, said as it is
    assert catalog_problem("rest", uri, {"warehouse": "analytics"}) is None
    named = SinkConfig(catalog_type="rest", catalog_uri=uri, catalog_properties={"warehouse": "a"})
    assert catalog_settings(named)["spark.sql.catalog.lake.warehouse"] == "a"
    for key in ("token", "credential", "uri", "type"):
        assert catalog_problem("rest", uri, {key: "x"}) is not None
    assert catalog_problem("jdbc", "jdbc:x", {"warehouse": "/w"}) is not None
    assert catalog_problem("hive", "THRIFT://hms:9083", {}) is None  # schemes in any case


def test_the_postgresql_driver_ships_with_the_debezium_wheel() -> None:
    jar = postgres_jar()
    assert jar is not None and jar.is_file()


def test_the_jvms_temporary_files_go_under_sparks_local_dir_when_one_is_set(
    tmp_path: Path,
) -> None:
    # A killed sink's JVM leaves its temporary folders behind: in its scratch space,
    # which the development stack's run directory holds, not in /tmp.
    scratch = tmp_path / "scratch"
    options = jvm_options({"SPARK_LOCAL_DIRS": f"{scratch},{tmp_path / 'other'}"})
    assert options.split() == ["-Duser.timezone=UTC", f"-Djava.io.tmpdir={scratch}"]
    assert scratch.is_dir()
    assert jvm_options({}) == "-Duser.timezone=UTC"


def test_every_catalog_type_the_configuration_takes_has_its_rules() -> None:
    field = {f.name: f for f in dataclasses.fields(SinkConfig)}["catalog_type"]
    assert set(typing.get_args(typing.get_type_hints(SinkConfig)["catalog_type"])) == set(KINDS)
    assert field.default in KINDS
