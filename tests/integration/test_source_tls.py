"""The processor reaches its source over TLS: ``verify-full`` against a private CA, with a
client certificate, on a private cluster that takes TLS connections only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from processor.errors import SourceUnavailableError
from processor.snapshot.postgres.reader import PostgresChunkReader
from tests.certificates import Authority
from tidemark.core.config import SourceConfig
from tidemark.devstack import postgres


@dataclasses.dataclass(frozen=True)
class TlsSource:
    """The cluster, the processor's source settings for it, and a CA it does not trust."""

    cluster: postgres.PostgresCluster
    source: SourceConfig
    rogue_ca: Path


@pytest.fixture(scope="module")
def tls_source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSource]:
    folder = tmp_path_factory.mktemp("tls")
    ca, rogue = Authority(folder, "private"), Authority(folder, "rogue")
    server = ca.issue("postgres", ips=("127.0.0.1",))  # no DNS name: "localhost" fails
    client = ca.issue(postgres.PROCESSOR_ROLE)
    tls = postgres.ServerTls(server.cert, server.key, ca.cert, (postgres.PROCESSOR_ROLE,))
    (folder / "run").mkdir()
    cluster = postgres.start_cluster(folder / "run", tls=tls)
    try:
        with psycopg.connect(**cluster.conninfo(), sslmode="require", autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute("CREATE TABLE public.tidemark_signal (id text, type text, data text)")
            conn.execute("CREATE TABLE public.secure_t (id int PRIMARY KEY, v text)")
            conn.execute(
                "INSERT INTO public.secure_t SELECT g, 'v' || g FROM generate_series(1, 9) g"
            )
        password = postgres.create_processor_role(cluster, "public.tidemark_signal")
        source = SourceConfig(
            **cluster.processor_login(password),
            sslmode="verify-full",
            sslrootcert=str(ca.cert),
            sslcert=str(client.cert),
            sslkey=str(client.key),
        )
        yield TlsSource(cluster, source, rogue.cert)
    finally:
        postgres.stop_cluster(cluster.data_dir, cluster.os_user)


def test_chunks_are_read_over_verified_tls_with_a_client_certificate(
    tls_source: TlsSource,
) -> None:
    reader = PostgresChunkReader(tls_source.source.session(read_only=True))
    try:
        info = reader.table_info("public.secure_t")
        assert len(reader.read_chunk(info, None, (9,)).rows) == 9
    finally:
        reader.close()
    with psycopg.connect(**tls_source.source.conninfo()) as conn:
        row = conn.execute(
            "SELECT ssl, version, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchone()
    assert row is not None and row[0] is True and row[1].startswith("TLS")
    assert row[2] == f"/CN={postgres.PROCESSOR_ROLE}"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sslrootcert": "rogue"}, "certificate verify failed"),
        ({"host": "localhost"}, "does not match host name"),
        ({"sslcert": "", "sslkey": ""}, "connection requires a valid client certificate"),
        ({"sslmode": "disable"}, "rejects connection"),
    ],
    ids=["another CA", "another host name", "no client certificate", "no TLS"],
)
def test_a_source_that_cannot_be_verified_or_reached_without_tls_is_not_read(
    tls_source: TlsSource, change: dict[str, str], reason: str
) -> None:
    if change.get("sslrootcert") == "rogue":
        change = {"sslrootcert": str(tls_source.rogue_ca)}
    source = dataclasses.replace(tls_source.source, **change)  # type: ignore[arg-type]
    with pytest.raises(SourceUnavailableError, match=reason):
        PostgresChunkReader(source.session(read_only=True))


def test_verify_ca_takes_the_certificate_whatever_the_host_name(tls_source: TlsSource) -> None:
    source = dataclasses.replace(tls_source.source, host="localhost", sslmode="verify-ca")
    with psycopg.connect(**source.conninfo()) as conn:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", "secure_t"))
        assert conn.execute(query).fetchone() == (9,)
