"""The sink's catalog settings for each catalog type (no Spark started)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from spark_sink.aws_sdk import JARS, aws_sdk_jars, copy_jars, wheel_libs
from spark_sink.session import (
    catalog_secrets,
    catalog_settings,
    jar_list,
    jvm_options,
    postgres_jar,
)
from tidemark.core.catalogs import (
    KINDS,
    S3_CLIENT_FACTORY,
    S3_FILE_IO,
    catalog_problem,
    on_object_storage,
    storage_properties,
)
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


def test_a_warehouse_on_s3_is_written_through_s3fileio_and_its_own_client_factory() -> None:
    sink = SinkConfig(
        catalog_type="jdbc",
        catalog_uri="jdbc:postgresql://db:5432/iceberg",
        warehouse="s3://lake/warehouse",
        catalog_properties={"s3.endpoint": "http://127.0.0.1:9000"},
    )
    settings = catalog_settings(sink)
    assert settings["spark.sql.catalog.lake.io-impl"] == S3_FILE_IO
    assert settings["spark.sql.catalog.lake.s3.client-factory-impl"] == S3_CLIENT_FACTORY
    assert settings["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:9000"
    # no credentials of any kind: the AWS SDK reads them from the environment
    assert not any("key" in k or "secret" in k for k in settings)
    assert catalog_secrets(sink) == {}


def test_the_s3_defaults_give_way_to_what_the_properties_say() -> None:
    assert storage_properties("s3a://lake/w", {}) == {
        "io-impl": S3_FILE_IO,
        "s3.client-factory-impl": S3_CLIENT_FACTORY,
    }
    # a role-assuming factory of Iceberg's (client.factory) would be overridden by the S3 one
    assert storage_properties("s3://lake/w", {"client.factory": "x.Assume"}) == {
        "io-impl": S3_FILE_IO
    }
    assert storage_properties("s3://lake/w", {"io-impl": "x.IO"}) == {
        "s3.client-factory-impl": S3_CLIENT_FACTORY
    }
    # elsewhere only the factory, which a REST catalog's own S3FileIO may take
    for elsewhere in ("/var/lib/w", "wh", "file:///w", "gs://lake/w", "hdfs://nn/w"):
        assert storage_properties(elsewhere, {}) == {"s3.client-factory-impl": S3_CLIENT_FACTORY}
    assert storage_properties("analytics", {"client.factory": "x.Assume"}) == {}


@pytest.mark.parametrize(
    "key", ["s3.access-key-id", "s3.secret-access-key", "s3.session-token", "my.password"]
)
def test_a_credential_in_the_catalog_properties_is_refused(key: str) -> None:
    problem = catalog_problem("jdbc", "jdbc:postgresql://db/i", {key: "x"})
    assert problem is not None and problem[0] == f"catalog_properties.{key}"
    assert "AWS_SECRET_ACCESS_KEY" in problem[1]


@pytest.mark.parametrize(
    "warehouse", ["s3://lake/w", "S3A://lake/w", "gs://lake/w", "wasbs://c@a/w"]
)
def test_a_hadoop_catalog_is_refused_on_object_storage(warehouse: str) -> None:
    assert on_object_storage(warehouse)
    problem = catalog_problem("hadoop", "", {}, warehouse=warehouse)
    assert problem is not None and problem[0] == "warehouse" and "atomic" in problem[1]
    by_class = {"catalog-impl": "org.apache.iceberg.hadoop.HadoopCatalog"}
    assert catalog_problem("custom", "", by_class, warehouse=warehouse) is not None
    assert catalog_problem("jdbc", "jdbc:postgresql://db/i", {}, warehouse=warehouse) is None
    assert catalog_problem("glue", "", {}, warehouse=warehouse) is None
    # ADLS Gen2 renames atomically (its hierarchical namespace)
    assert catalog_problem("hadoop", "", {}, warehouse="abfss://c@a.dfs.core.windows.net/w") is None


def test_the_aws_sdk_jars_come_from_the_image_folder_or_the_debezium_wheel(
    tmp_path: Path,
) -> None:
    libs = wheel_libs()
    assert libs is not None, "the test extra installs the Debezium wheel"
    # what the image's build stage runs, on the wheel the tests installed
    copied = copy_jars(libs, tmp_path / "aws-sdk")
    assert [p.name for p in copied] == list(JARS)
    assert aws_sdk_jars(tmp_path / "aws-sdk") == copied
    # without the image's folder, the wheel's own copies
    assert aws_sdk_jars(tmp_path / "none") == [libs / jar for jar in JARS]
    (tmp_path / "aws-sdk" / JARS[0]).unlink()  # a folder missing one is not taken
    assert aws_sdk_jars(tmp_path / "aws-sdk") == [libs / jar for jar in JARS]
    with pytest.raises(FileNotFoundError, match=JARS[0]):
        copy_jars(tmp_path / "aws-sdk", tmp_path / "again")


def test_jars_the_configuration_names_are_added_to_the_sinks_own() -> None:
    own = [Path("/j/iceberg.jar"), Path("/j/s3.jar")]
    assert jar_list(SinkConfig(), own) == "/j/iceberg.jar,/j/s3.jar"
    glue = SinkConfig(spark_conf={"spark.jars": "/x/glue.jar, /x/kms.jar"})
    assert jar_list(glue, own) == "/j/iceberg.jar,/j/s3.jar,/x/glue.jar,/x/kms.jar"
