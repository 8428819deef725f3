"""The Debezium connector settings that change how a value is encoded, named as Debezium names them.

``source.debezium`` in the configuration holds them (``decimal.handling.mode:
string``). They are the one source of truth: backfill rows are encoded by them,
the dev stack writes them into the connector it starts, and the processor checks
them against the change events it sees before a backfill emits a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.errors import ConfigError

#: Each setting's allowed values, the connector's default first.
CHOICES: dict[str, tuple[str, ...]] = {
    "decimal.handling.mode": ("precise", "double", "string"),
    "time.precision.mode": ("adaptive", "adaptive_time_microseconds", "connect", "isostring"),
    "binary.handling.mode": ("bytes", "base64", "base64-url-safe", "hex"),
    "interval.handling.mode": ("numeric", "string"),
    "hstore.handling.mode": ("json", "map"),
}
#: Settings that take a number: the connector's default.
NUMBERS: dict[str, int] = {"money.fraction.digits": 2}
#: Settings of which only the connector's default is supported (another value would be
#: read as data): the default.
DEFAULT_ONLY: dict[str, str] = {"unavailable.value.placeholder": "__debezium_unavailable_value"}


@dataclass(frozen=True)
class ValueSettings:
    """``source.debezium`` read and checked, with the connector's defaults filled in."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"
    money_fraction_digits: int = 2

    @staticmethod
    def read(properties: Mapping[str, str]) -> ValueSettings:
        """The settings of ``properties`` (connector property names); :class:`ConfigError`
        names an unknown property or a value the connector would not take."""
        values: dict[str, str | int] = {}
        for name, raw in properties.items():
            where = f"source.debezium.{name}"
            if name in CHOICES:
                if raw not in CHOICES[name]:
                    allowed = ", ".join(CHOICES[name])
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
                known = ", ".join([*CHOICES, *NUMBERS, *DEFAULT_ONLY])
                raise ConfigError(f"source.debezium: unknown setting {name!r} (known: {known})")
        return ValueSettings(**values)  # type: ignore[arg-type]

    def properties(self) -> dict[str, str]:
        """The connector properties these settings are."""
        return {name: str(getattr(self, name.replace(".", "_"))) for name in [*CHOICES, *NUMBERS]}
