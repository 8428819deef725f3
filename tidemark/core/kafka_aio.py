"""``kafka.client_properties`` for aiokafka: Faust's own clients, and the group repair.

The configuration names Kafka's client settings as librdkafka does (the data plane,
the coordinator, the sink and the tools are librdkafka clients). aiokafka names
them otherwise and takes TLS as an ``ssl.SSLContext``, so the security settings are
translated:

===================================== =========================================
librdkafka                            aiokafka
===================================== =========================================
``security.protocol``                 ``security_protocol`` (PLAINTEXT, SSL,
                                      SASL_PLAINTEXT, SASL_SSL)
``ssl.ca.location``                   the context's trusted CA file
``ssl.certificate.location``,         the context's client certificate chain
``ssl.key.location``,
``ssl.key.password``
``ssl.endpoint.identification.algorithm``  ``https`` (the default): the host name is
                                      checked; ``none``: it is not
``sasl.mechanism`` (or ``sasl.mechanisms``)  ``sasl_mechanism`` (PLAIN, SCRAM-SHA-256,
                                      SCRAM-SHA-512)
``sasl.username``, ``sasl.password``  ``sasl_plain_username``, ``sasl_plain_password``
===================================== =========================================

Any other ``ssl.*`` or ``sasl.*`` setting (a PKCS#12 keystore, Kerberos, OAUTHBEARER)
has no translation and is refused when the configuration loads, rather than leaving
Faust's clients unsecured. Settings outside security (``linger.ms``, ...) concern the
librdkafka clients only.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from tidemark.core.errors import ConfigError

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_TRANSLATED = {
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
}


def check_translatable(properties: Mapping[str, str]) -> None:
    """:class:`ConfigError` for a security setting aiokafka's clients could not follow."""
    for name in properties:
        if name.split(".")[0] in ("ssl", "sasl") and name not in _TRANSLATED:
            raise ConfigError(
                f"kafka.client_properties.{name}: Faust's clients (aiokafka) have no such "
                f"setting; use {', '.join(sorted(_TRANSLATED))}"
            )
    protocol = str(properties.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"kafka.client_properties.security.protocol: {protocol!r} is not one of "
            + ", ".join(_PROTOCOLS)
        )
    if protocol.startswith("SASL"):
        mechanism = _mechanism(properties)
        if mechanism not in _MECHANISMS:
            raise ConfigError(
                f"kafka.client_properties.sasl.mechanism: {mechanism!r} is not one of "
                + ", ".join(_MECHANISMS)
            )
    checked = str(properties.get("ssl.endpoint.identification.algorithm", "https")).lower()
    if checked not in ("https", "none"):
        raise ConfigError(
            "kafka.client_properties.ssl.endpoint.identification.algorithm: https or none"
        )


def aiokafka_settings(properties: Mapping[str, str]) -> dict[str, Any]:
    """aiokafka's keyword arguments for ``properties`` (checked), with the TLS context built
    from its files."""
    check_translatable(properties)
    protocol = str(properties.get("security.protocol", "PLAINTEXT")).upper()
    settings: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = tls_context(properties)
    if protocol.startswith("SASL"):
        settings["sasl_mechanism"] = _mechanism(properties)
        settings["sasl_plain_username"] = properties.get("sasl.username")
        settings["sasl_plain_password"] = properties.get("sasl.password")
    return settings


def tls_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    """The client TLS context librdkafka's ``ssl.*`` settings describe."""
    context = ssl.create_default_context(cafile=properties.get("ssl.ca.location") or None)
    certificate = properties.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(
            certificate,
            properties.get("ssl.key.location") or None,
            properties.get("ssl.key.password") or None,
        )
    algorithm = str(properties.get("ssl.endpoint.identification.algorithm", "https")).lower()
    context.check_hostname = algorithm == "https"
    return context


def _mechanism(properties: Mapping[str, str]) -> str:
    return str(properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "").upper()
