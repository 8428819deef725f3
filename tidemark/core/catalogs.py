"""What each kind of Iceberg catalog needs from ``sink.*`` (``sink.catalog_type``).

Iceberg's Spark catalog takes either a ``type`` it knows (``CatalogUtil``'s: hadoop,
jdbc, rest, hive, nessie, glue) or a ``catalog-impl`` class, never both: it refuses a
catalog with both ("both type and catalog-impl are set"). ``custom`` is Tidemark's name
for the second: the class comes from ``sink.catalog_properties["catalog-impl"]`` and no
``type`` is set. The settings Tidemark derives from ``sink.*`` fields (the URI, the
warehouse, the credentials) are not taken from ``catalog_properties`` too, so that one
place says each, and secrets come only from ``sink.catalog_password`` (the
environment).
"""

from __future__ import annotations

from dataclasses import dataclass

CUSTOM = "custom"


@dataclass(frozen=True)
class CatalogKind:
    """What one ``catalog_type`` takes."""

    #: The schemes ``catalog_uri`` may have; empty: the catalog takes no URI.
    uri_schemes: tuple[str, ...]
    #: What the URI names, for messages.
    uri_names: str = ""


KINDS: dict[str, CatalogKind] = {
    "hadoop": CatalogKind(()),
    "jdbc": CatalogKind(("jdbc:",), "the catalog's database (jdbc:postgresql://host:5432/db)"),
    "rest": CatalogKind(("http://", "https://"), "the REST catalog's endpoint"),
    "hive": CatalogKind(("thrift://",), "the Hive metastore (thrift://host:9083)"),
    "nessie": CatalogKind(("http://", "https://"), "Nessie's API (https://host/api/v2)"),
    "glue": CatalogKind(()),
    CUSTOM: CatalogKind(()),
}

#: ``catalog_properties`` keys that ``sink.*`` fields set, and the field that does.
DERIVED = {
    "type": "catalog_type",
    "catalog-impl": "catalog_type (custom) with this property",
    "uri": "catalog_uri",
    "warehouse": "warehouse",
    "jdbc.user": "catalog_user",
    "jdbc.password": "catalog_password",
    "credential": "catalog_user and catalog_password",
    "token": "catalog_password",
    "authentication.token": "catalog_password",
}


def catalog_problem(
    catalog_type: str, uri: str, properties: dict[str, str]
) -> tuple[str, str] | None:
    """What is wrong with a catalog's settings, as (the field, why), or ``None``."""
    kind = KINDS[catalog_type]
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
    for key, field in DERIVED.items():
        if key in properties and not (key == "catalog-impl" and catalog_type == CUSTOM):
            return (f"catalog_properties.{key}", f"set it with sink.{field}")
    if kind.uri_schemes and not uri:
        return ("catalog_uri", f"a {catalog_type} catalog needs its URI: {kind.uri_names}")
    if kind.uri_schemes and not uri.startswith(kind.uri_schemes):
        return ("catalog_uri", f"a {catalog_type} catalog's URI names {kind.uri_names}")
    if uri and not kind.uri_schemes and catalog_type != CUSTOM:
        hint = " (glue.endpoint names another Glue endpoint)" if catalog_type == "glue" else ""
        return ("catalog_uri", f"a {catalog_type} catalog takes no URI{hint}")
    return None
