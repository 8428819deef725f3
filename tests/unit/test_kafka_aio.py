"""librdkafka's security settings translated for Faust's clients (aiokafka), or refused."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml
from faust.auth import SASLCredentials, SSLCredentials

from processor.app import faust_credentials
from tests.certificates import Authority
from tidemark.core.config import load_config
from tidemark.core.errors import ConfigError
from tidemark.core.kafka_aio import aiokafka_settings


def test_plaintext_needs_nothing() -> None:
    assert aiokafka_settings({}) == {"security_protocol": "PLAINTEXT"}
    assert aiokafka_settings({"linger.ms": "5"}) == {"security_protocol": "PLAINTEXT"}
    assert faust_credentials({}) is None


def test_tls_with_a_private_ca_and_a_client_certificate(tmp_path: Path) -> None:
    authority = Authority(tmp_path, "kafka")
    client = authority.issue("tidemark")
    properties = {
        "security.protocol": "ssl",
        "ssl.ca.location": str(authority.cert),
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
    }
    settings = aiokafka_settings(properties)
    context = settings["ssl_context"]
    assert settings["security_protocol"] == "SSL"
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    subjects = [dict(item[0] for item in ca["subject"]) for ca in context.get_ca_certs()]
    assert {"commonName": "kafka test CA"} in subjects
    unchecked = aiokafka_settings({**properties, "ssl.endpoint.identification.algorithm": "none"})
    assert unchecked["ssl_context"].check_hostname is False
    credentials = faust_credentials(properties)
    assert isinstance(credentials, SSLCredentials) and credentials.context is not None


def test_sasl_over_tls(tmp_path: Path) -> None:
    authority = Authority(tmp_path, "kafka")
    properties = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(authority.cert),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "tidemark",
        "sasl.password": "s3cret",
    }
    settings = aiokafka_settings(properties)
    assert settings["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (settings["sasl_plain_username"], settings["sasl_plain_password"]) == (
        "tidemark",
        "s3cret",
    )
    credentials = faust_credentials(properties)
    assert isinstance(credentials, SASLCredentials)
    assert (
        credentials.protocol.value == "SASL_SSL" and credentials.mechanism.value == "SCRAM-SHA-512"
    )


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"ssl.keystore.location": "k.p12"}, "ssl.keystore.location: Faust's clients"),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name: Faust's"),
        ({"security.protocol": "TLS"}, "'TLS' is not one of PLAINTEXT"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"},
            "'GSSAPI' is not one of PLAIN",
        ),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "https or none"),
    ],
)
def test_what_aiokafka_cannot_follow_is_refused_when_the_configuration_loads(
    properties: dict[str, str], message: str, tmp_path: Path
) -> None:
    path = tmp_path / "tidemark.yaml"
    path.write_text(yaml.safe_dump({"kafka": {"client_properties": properties}}))
    with pytest.raises(ConfigError, match=message):
        load_config(path, environ={})
