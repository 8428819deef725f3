"""A private PostgreSQL cluster for development and tests (``initdb`` + ``pg_ctl``).

The cluster listens on loopback only, authenticates with a generated password
(SCRAM), and runs with ``wal_level=logical`` for Debezium. PostgreSQL refuses
to run as root, so under root the cluster belongs to the ``postgres`` system
user and its data folder lives in a private temporary folder that user owns.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tidemark.core.binaries import find_pg_bin
from tidemark.core.errors import MissingBinaryError
from tidemark.core.ports import claim_port
from tidemark.devstack.errors import DevStackError
from tidemark.devstack.procs import wait_for

SUPERUSER = "tidemark"
DBNAME = "tidemark"
#: The role the processor connects as: it may read the tables and write only its own
#: signal table (README, Security).
PROCESSOR_ROLE = "tidemark_processor"
_SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    # A throwaway development cluster: durability is not needed, speed is.
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
}


@dataclass(frozen=True)
class PostgresCluster:
    """A running private cluster."""

    data_dir: Path
    port: int
    password: str
    log: Path
    os_user: str | None

    def conninfo(self, dbname: str = DBNAME) -> dict[str, object]:
        """Keyword arguments for ``psycopg.connect``."""
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "dbname": dbname,
            "user": SUPERUSER,
            "password": self.password,
        }

    def processor_login(self, password: str) -> dict[str, Any]:
        """The source settings that log in as :data:`PROCESSOR_ROLE` (its ``password``)."""
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "dbname": DBNAME,
            "user": PROCESSOR_ROLE,
            "password": password,
        }


@dataclass(frozen=True)
class ServerTls:
    """A cluster that takes TLS connections only: its certificate and key, and the CA whose
    client certificates it checks where ``pg_hba.conf`` asks for one (:func:`_tls_only`)."""

    cert: Path
    key: Path
    ca: Path
    #: Roles that must also present a client certificate naming them.
    client_cert_roles: tuple[str, ...] = ()


def start_cluster(run_dir: Path, port: int = 0, tls: ServerTls | None = None) -> PostgresCluster:
    """initdb a new cluster, start it on ``port`` (0: a free one) and create the database;
    with ``tls``, TLS connections only."""
    port = claim_port(port, "PostgreSQL server")
    os_user = _server_user()
    data_dir = _data_dir(run_dir, os_user)
    try:
        # The server user writes the log, so it lives beside the data; run_dir links to it.
        log = data_dir.parent / "postgres.log"
        password = secrets.token_urlsafe(18)
        pwfile = data_dir.parent / "pwfile"
        pwfile.write_text(password + "\n")
        _hand_over(pwfile, os_user)
        _run(
            [
                str(find_pg_bin("initdb")),
                "-D",
                str(data_dir),
                "-U",
                SUPERUSER,
                "--auth-host=scram-sha-256",
                "--auth-local=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
            os_user,
            "initdb",
        )
        pwfile.unlink()
        settings = dict(_SERVER_SETTINGS)
        if tls is not None:
            settings.update(_tls_only(data_dir, tls, os_user))
        options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        options += f" -p {port} -c unix_socket_directories={data_dir}"
        log.touch()
        _hand_over(log, os_user)
        link = run_dir / "postgres.log"
        if link != log:
            link.unlink(missing_ok=True)
            link.symlink_to(log)
        _run(
            [
                str(find_pg_bin("pg_ctl")),
                "-D",
                str(data_dir),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ],
            os_user,
            "pg_ctl start",
            log,
        )
        cluster = PostgresCluster(data_dir, port, password, log, os_user)
        wait_for(lambda: _can_connect(cluster), 30, "PostgreSQL", log)
        with psycopg.connect(**cluster.conninfo("postgres"), autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(f"CREATE DATABASE {DBNAME}")  # noqa: S608 - a constant name
        with psycopg.connect(**cluster.conninfo(DBNAME), autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute("CREATE EXTENSION hstore")  # a contrib type many sources use
        return cluster
    except BaseException:
        stop_cluster(data_dir, os_user)
        raise


def _tls_only(data_dir: Path, tls: ServerTls, os_user: str | None) -> dict[str, str]:
    """Put the server's certificate, key and CA in ``data_dir``, let only TLS connections in
    (with a client certificate for ``tls.client_cert_roles``), and return the settings."""
    for name, source in (("server.crt", tls.cert), ("server.key", tls.key), ("ca.crt", tls.ca)):
        target = data_dir / name
        shutil.copyfile(source, target)
        target.chmod(0o600)
        _hand_over(target, os_user)
    lines = ["local all all scram-sha-256"]
    lines += [
        f"hostssl all {role} 127.0.0.1/32 scram-sha-256 clientcert=verify-full"
        for role in tls.client_cert_roles
    ]
    lines += ["hostssl all all 127.0.0.1/32 scram-sha-256", "host all all all reject"]
    (data_dir / "pg_hba.conf").write_text("\n".join(lines) + "\n")
    return {
        "ssl": "on",
        "ssl_cert_file": "server.crt",
        "ssl_key_file": "server.key",
        "ssl_ca_file": "ca.crt",
    }


def restart_cluster(data_dir: Path, os_user: str | None) -> None:
    """Restart the cluster with a fast shutdown (every connection is cut), same options."""
    log = data_dir.parent / "postgres.log"  # the server's output, never the caller's pipes
    pg_ctl = str(find_pg_bin("pg_ctl"))
    command = [pg_ctl, "-D", str(data_dir), "-l", str(log), "-m", "fast", "-w", "-t", "60"]
    _run([*command, "restart"], os_user, "pg_ctl restart", log)


def stop_cluster(data_dir: Path, os_user: str | None) -> None:
    """Stop the cluster (fast shutdown) and delete its data folder."""
    if (data_dir / "postmaster.pid").exists():
        try:
            _run(
                [
                    str(find_pg_bin("pg_ctl")),
                    "-D",
                    str(data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "60",
                    "stop",
                ],
                os_user,
                "pg_ctl stop",
            )
        except (DevStackError, MissingBinaryError):
            if (data_dir / "postmaster.pid").exists():
                raise
    shutil.rmtree(
        data_dir.parent if data_dir.parent.name.startswith("tidemark-pg-") else data_dir,
        ignore_errors=True,
    )


def _can_connect(cluster: PostgresCluster) -> bool:
    try:
        with psycopg.connect(**cluster.conninfo("postgres"), connect_timeout=2):  # type: ignore[arg-type]
            return True
    except psycopg.OperationalError:
        return False


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise DevStackError(
            "running as root, PostgreSQL needs an unprivileged 'postgres' user; "
            "install Debian's postgresql package (make setup) or run as a normal user"
        ) from None
    return "postgres"


def _data_dir(run_dir: Path, os_user: str | None) -> Path:
    if os_user is None:
        parent = run_dir / "postgres"
        parent.mkdir(parents=True, exist_ok=True)
    else:
        # run_dir may sit under a folder the server user cannot enter (/root, pytest's tmp).
        parent = Path(tempfile.mkdtemp(prefix="tidemark-pg-"))
        _hand_over(parent, os_user)
    return parent / "data"


def _hand_over(path: Path, os_user: str | None) -> None:
    if os_user is not None:
        entry = pwd.getpwnam(os_user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(cmd: list[str], os_user: str | None, what: str, log: Path | None = None) -> None:
    result = subprocess.run(
        cmd, capture_output=True, text=True, user=os_user, check=False, timeout=120, cwd="/"
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        if log is not None and log.exists():
            detail += "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-10:])
        raise DevStackError(f"{what} failed: {detail}")


def processor_grants(role: str, signal_table: str) -> list[sql.Composed]:
    """What the processor's ``role`` needs, and no more: ``SELECT`` on the tables (here every
    table of the cluster's owner, also those created later), ``INSERT`` and ``DELETE`` on
    Tidemark's signal table (signal-table watermarks only). Reading the replication slot's
    position (``pg_replication_slots``), ``pg_current_snapshot()`` and
    ``pg_current_wal_insert_lsn()`` need no grant."""
    who = sql.Identifier(role)
    return [
        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(who),
        sql.SQL("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO {}").format(who),
        sql.SQL("GRANT INSERT, DELETE ON {} TO {}").format(
            sql.Identifier(*signal_table.split(".")), who
        ),
    ]


def create_processor_role(cluster: PostgresCluster, signal_table: str) -> str:
    """Create :data:`PROCESSOR_ROLE` with a generated password (returned) and its grants."""
    password = secrets.token_urlsafe(18)
    with psycopg.connect(**cluster.conninfo(), autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(PROCESSOR_ROLE), sql.Literal(password)
            )
        )
        for grant in processor_grants(PROCESSOR_ROLE, signal_table):
            conn.execute(grant)
    return password


def run_psql(conninfo: dict[str, object], commands: list[str]) -> int:
    """``psql`` on ``conninfo``'s database: each of ``commands`` in turn (stopping at the
    first error), or an interactive session when there are none; its exit code. The
    password goes through the environment (``PGPASSWORD``), never the command line."""
    argv = [str(find_pg_bin("psql")), "-X", "-v", "ON_ERROR_STOP=1"]
    for command in commands:
        argv += ["-c", command]
    env = dict(
        os.environ,
        PGHOST=str(conninfo["host"]),
        PGPORT=str(conninfo["port"]),
        PGDATABASE=str(conninfo["dbname"]),
        PGUSER=str(conninfo["user"]),
        PGPASSWORD=str(conninfo["password"]),
    )
    return subprocess.run(argv, env=env, check=False).returncode
