"""The sink's catalog settings for each catalog type (no Spark started)."""

from __future__ import annotations

from pathlib import Path

from spark_sink.session import catalog_secrets, catalog_settings, jvm_options, postgres_jar
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
