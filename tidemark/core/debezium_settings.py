"""The Debezium connector settings that change how a value is encoded, named as Debezium names them.

``source.debezium`` in the configuration holds them (``decimal.handling.mode:
string``). They are the one source of truth: backfill rows are encoded by them,
the dev stack writes them into the connector it starts, and the processor checks
them against the change events it sees before a backfill emits a row.

``skipped.operations`` says whether the connector writes truncate events (``none``) or
not (``t``, its default); Tidemark needs every other operation.

The block also takes the connector's ``transforms`` when they are Debezium's
``ExtractNewRecordState`` (flattened rows, read with the ``upsert`` envelope): the
dev stack starts its connector with them. The processor learns a flattened topic's
form from its events, so it needs Debezium's default field prefix (``__``) to know
the transform's fields from the table's columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.core.errors import ConfigError

#: Each setting's allowed values, the connector's default first.
CHOICES: dict[str, tuple[str, ...]] = {
    "decimal.handling.mode": ("precise", "double", "string"),
    "time.precision.mode": ("adaptive", "adaptive_time_microseconds", "connect", "isostring"),
    "binary.handling.mode": ("bytes", "base64", "base64-url-safe", "hex"),
    "interval.handling.mode": ("numeric", "string"),
    "hstore.handling.mode": ("json", "map"),
}
#: Settings of which events the connector writes (not how it encodes values): each's
#: allowed values, the default first. Tidemark needs every operation but truncates.
EVENTS: dict[str, tuple[str, ...]] = {"skipped.operations": ("t", "none")}
#: Settings that take a number: the connector's default.
NUMBERS: dict[str, int] = {"money.fraction.digits": 2}
#: Settings of which only the connector's default is supported (another value would be
#: read as data): the default.
DEFAULT_ONLY: dict[str, str] = {"unavailable.value.placeholder": "__debezium_unavailable_value"}
#: The one transform a connector may apply: flattened rows (``upsert`` topics).
FLATTEN = "io.debezium.transforms.ExtractNewRecordState"
#: Its settings that may be given, and those that must keep the default (the prefix by
#: which the processor tells the transform's fields from the table's columns).
FLATTEN_SETTINGS = {
    "add.fields",
    "add.headers",
    "delete.tombstone.handling.mode",
    "drop.fields.header.name",
}
FLATTEN_DEFAULT_ONLY = {"add.fields.prefix": "__", "add.headers.prefix": "__"}


@dataclass(frozen=True)
class ValueSettings:
    """``source.debezium`` read and checked, with the connector's defaults filled in."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"
    money_fraction_digits: int = 2
    skipped_operations: str = "t"
    #: ``transforms`` and ``transforms.<name>.<setting>`` as given (checked).
    transforms: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def read(properties: Mapping[str, str]) -> ValueSettings:
        """The settings of ``properties`` (connector property names); :class:`ConfigError`
        names an unknown property or a value the connector would not take."""
        values: dict[str, str | int | tuple[tuple[str, str], ...]] = {}
        transforms = {n: str(v) for n, v in properties.items() if n.split(".")[0] == "transforms"}
        if transforms:
            values["transforms"] = _transforms(transforms)
        for name, raw in properties.items():
            if name in transforms:
                continue
            where = f"source.debezium.{name}"
            if name in CHOICES or name in EVENTS:
                choices = CHOICES.get(name) or EVENTS[name]
                if raw not in choices:
                    allowed = ", ".join(choices)
                    raise ConfigError(f"{where}: {raw!r} is not one of {allowed}")
                values[name.replace(".", "_")] = raw
            elif name in DEFAULT_ONLY:
                if raw != DEFAULT_ONLY[name]:
                    raise ConfigError(
                        f"{where}: only the connector's default {DEFAULT_ONLY[name]!r} is "
                        "supported (another placeholder would be read as a value)"
                    )
            elif name in NUMBERS:
                if not str(raw).isdigit():
                    raise ConfigError(f"{where}: expected a whole number, got {raw!r}")
                values[name.replace(".", "_")] = int(raw)
            else:
                known = ", ".join([*CHOICES, *EVENTS, *NUMBERS, *DEFAULT_ONLY, "transforms"])
                raise ConfigError(f"source.debezium: unknown setting {name!r} (known: {known})")
        return ValueSettings(**values)  # type: ignore[arg-type]

    def properties(self) -> dict[str, str]:
        """The connector properties these settings are."""
        names = [*CHOICES, *EVENTS, *NUMBERS]
        return {n: str(getattr(self, n.replace(".", "_"))) for n in names} | dict(self.transforms)


def _transforms(properties: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``transforms`` and its ``transforms.<name>.*`` settings, checked: only Debezium's
    ``ExtractNewRecordState``, with the settings the processor can follow."""
    names = [n.strip() for n in properties.get("transforms", "").split(",") if n.strip()]
    if not names:
        raise ConfigError("source.debezium.transforms: name the transforms (e.g. unwrap)")
    for name, raw in properties.items():
        if name == "transforms":
            continue
        parts = name.split(".", 2)
        if len(parts) < 3 or parts[1] not in names:
            raise ConfigError(f"source.debezium.{name}: not a setting of a listed transform")
        setting = parts[2]
        if setting == "type":
            if raw != FLATTEN:
                raise ConfigError(
                    f"source.debezium.{name}: only {FLATTEN} is supported (another transform "
                    "would change events in ways backfills do not reproduce)"
                )
        elif setting in FLATTEN_DEFAULT_ONLY:
            if raw != FLATTEN_DEFAULT_ONLY[setting]:
                raise ConfigError(
                    f"source.debezium.{name}: only the default {FLATTEN_DEFAULT_ONLY[setting]!r} "
                    "is supported (the processor tells the transform's fields by it)"
                )
        elif setting not in FLATTEN_SETTINGS:
            known = ", ".join(sorted([*FLATTEN_SETTINGS, *FLATTEN_DEFAULT_ONLY, "type"]))
            raise ConfigError(f"source.debezium.{name}: unknown setting (known: {known})")
    for name in names:
        if properties.get(f"transforms.{name}.type") is None:
            raise ConfigError(f"source.debezium.transforms.{name}.type: missing")
    return tuple(properties.items())
