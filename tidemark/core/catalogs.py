"""What each kind of Iceberg catalog needs from ``sink.*`` (``sink.catalog_type``).

Iceberg's Spark catalog takes either a ``type`` it knows (``CatalogUtil``'s: hadoop,
jdbc, rest, hive, nessie, glue) or a ``catalog-impl`` class, never both: it refuses a
catalog with both ("both type and catalog-impl are set"). ``custom`` is Tidemark's name
for the second: the class comes from ``sink.catalog_properties["catalog-impl"]`` and no
``type`` is set. The settings Tidemark derives from ``sink.*`` fields (the URI, the
warehouse, the credentials it knows of) are not taken from ``catalog_properties`` too,
so that one place says each, and those credentials come only from
``sink.catalog_password`` (the environment).

A warehouse on object storage (``s3://bucket/path``) is written through Iceberg's
``S3FileIO``, with the AWS SDK's own credential chain (``AWS_*`` variables of the
environment, a container's role): :func:`storage_properties` says the settings it takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CUSTOM = "custom"


@dataclass(frozen=True)
class CatalogKind:
    """What one ``catalog_type`` takes."""

    #: The schemes ``catalog_uri`` may have; empty: the catalog takes no URI.
    uri_schemes: tuple[str, ...] = ()
    #: What the URI names, for messages.
    uri_names: str = ""
    #: ``catalog_properties`` keys its ``sink.*`` fields set, and the field that does.
    derived: dict[str, str] = field(default_factory=dict)
    #: Whether it takes ``catalog_user`` (a database user, an OAuth2 client).
    takes_user: bool = False
    #: Whether its warehouse is a location (``sink.warehouse``). A REST catalog's may be
    #: a name the service knows, and a custom catalog's anything: there
    #: ``catalog_properties.warehouse`` may say it as it is.
    warehouse_is_location: bool = True


KINDS: dict[str, CatalogKind] = {
    "hadoop": CatalogKind(),
    "jdbc": CatalogKind(
        ("jdbc:",),
        "the catalog's database (jdbc:postgresql://host:5432/db)",
        {"jdbc.user": "catalog_user", "jdbc.password": "catalog_password"},
        takes_user=True,
    ),
    "rest": CatalogKind(
        ("http://", "https://"),
        "the REST catalog's endpoint",
        {
            "credential": "catalog_user and catalog_password",
            "token": "catalog_password (and no catalog_user)",
        },
        takes_user=True,
        warehouse_is_location=False,
    ),
    "hive": CatalogKind(("thrift://",), "the Hive metastore (thrift://host:9083)"),
    "nessie": CatalogKind(
        ("http://", "https://"),
        "Nessie's API (https://host/api/v2)",
        {"authentication.token": "catalog_password"},
    ),
    "glue": CatalogKind(),
    CUSTOM: CatalogKind(warehouse_is_location=False),
}

#: Iceberg's catalog on a bare filesystem: a commit is a rename, and two processes'
#: commits can overwrite each other.
HADOOP_CATALOG = "org.apache.iceberg.hadoop.HadoopCatalog"

#: Warehouse schemes of object stores without an atomic rename, so no ``hadoop`` catalog
#: there (ADLS Gen2's ``abfs`` renames atomically with its hierarchical namespace).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "wasb", "wasbs")
#: The schemes Iceberg's ``S3FileIO`` reads and writes.
S3_SCHEMES = ("s3", "s3a", "s3n")
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
#: ``S3FileIO``'s own client factory. Without it ``S3FileIO`` goes through Iceberg's
#: general ``AwsClientFactories``, which loads the AWS SDK's KMS, STS and Glue clients
#: too; the image carries only the SDK's S3 client and what it needs.
S3_CLIENT_FACTORY = "org.apache.iceberg.aws.s3.DefaultS3FileIOAwsClientFactory"


def scheme(location: str) -> str:
    """A location's URI scheme, in lower case; ``""`` for a local path."""
    head, sep, _rest = location.partition("://")
    return head.lower() if sep and "/" not in head else ""


def on_object_storage(location: str) -> bool:
    """Whether ``location`` (a warehouse, a table's location) lies on an object store."""
    return scheme(location) in OBJECT_STORE_SCHEMES


def storage_properties(warehouse: str, properties: dict[str, str]) -> dict[str, str]:
    """The catalog settings besides ``catalog_properties`` for tables on S3: ``S3FileIO``
    for a warehouse on S3, and its own client factory for any catalog (a REST catalog
    may name S3FileIO itself, for a warehouse it knows by name); each unless the
    properties say otherwise (an ``io-impl``; a ``client.factory`` such as Iceberg's
    role-assuming one, which the S3 factory would override). Other FileIOs ignore the
    factory."""
    settings = {}
    if scheme(warehouse) in S3_SCHEMES and "io-impl" not in properties:
        settings["io-impl"] = S3_FILE_IO
    if not {"s3.client-factory-impl", "client.factory"} & set(properties):
        settings["s3.client-factory-impl"] = S3_CLIENT_FACTORY
    return settings


#: ``catalog_properties`` keys that hold a credential: refused, since the file is no
#: place for one (the AWS SDK reads its keys from the environment).
_CREDENTIAL = re.compile(r"access-key-id|secret|password|session-token", re.IGNORECASE)


#: ``catalog_properties`` keys the sink sets for every type.
COMMON = {"type": "catalog_type", "uri": "catalog_uri"}


def catalog_problem(
    catalog_type: str, uri: str, properties: dict[str, str], user: str = "", warehouse: str = ""
) -> tuple[str, str] | None:
    """What is wrong with a catalog's settings, as (the field, why), or ``None``."""
    kind = KINDS[catalog_type]
    for key in properties:
        if _CREDENTIAL.search(key):
            return (
                f"catalog_properties.{key}",
                "a credential does not go in the file: the catalog's password or token in "
                "TIDEMARK_SINK__CATALOG_PASSWORD, S3's keys in the AWS SDK's variables "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
            )
    if on_object_storage(warehouse) and commits_can_overwrite(catalog_type, properties):
        return (
            "warehouse",
            f"a hadoop catalog commits by renaming a file, which {scheme(warehouse)}:// "
            "does not do atomically: keep its tables in a catalog service (catalog_type "
            "jdbc, rest, hive, nessie or glue) with the warehouse on object storage",
        )
    if user and not kind.takes_user:
        return ("catalog_user", f"a {catalog_type} catalog takes no user (jdbc and rest do)")
    impl = properties.get("catalog-impl", "")
    if catalog_type == CUSTOM:
        if not impl:
            return (
                "catalog_properties",
                "a custom catalog needs its class: catalog-impl: com.example.MyCatalog",
            )
    elif impl:
        return (
            "catalog_properties.catalog-impl",
            f"only with catalog_type: custom (Iceberg refuses a {catalog_type} catalog "
            "with a catalog-impl too: both type and catalog-impl are set)",
        )
    derived = {**COMMON, **kind.derived}
    if kind.warehouse_is_location:
        derived["warehouse"] = "warehouse"
    for key, setting in derived.items():
        if key in properties:
            return (f"catalog_properties.{key}", f"set it with sink.{setting}")
    if kind.uri_schemes and not uri:
        return ("catalog_uri", f"a {catalog_type} catalog needs its URI: {kind.uri_names}")
    if kind.uri_schemes and not uri.lower().startswith(kind.uri_schemes):
        return ("catalog_uri", f"a {catalog_type} catalog's URI names {kind.uri_names}")
    if uri and not kind.uri_schemes and catalog_type != CUSTOM:
        hint = " (glue.endpoint names another Glue endpoint)" if catalog_type == "glue" else ""
        return ("catalog_uri", f"a {catalog_type} catalog takes no URI{hint}")
    return None


def commits_can_overwrite(catalog_type: str, properties: dict[str, str]) -> bool:
    """Whether two processes' commits to this catalog can overwrite each other: a
    ``hadoop`` catalog, under its type or as a ``custom`` catalog's class."""
    return catalog_type == "hadoop" or (
        catalog_type == CUSTOM and properties.get("catalog-impl") == HADOOP_CATALOG
    )
