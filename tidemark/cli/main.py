"""The ``tidemark`` command line.

Every subcommand reads the configuration through :func:`tidemark.core.config.load_config`;
errors Tidemark expects (a bad configuration, a port in use, no Java) end in one
line on stderr and exit code 2, never in a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tidemark.core.config import Config, load_config
from tidemark.core.errors import TidemarkError

if TYPE_CHECKING:
    from processor.pipeline.offsets import Offsets

log = logging.getLogger("tidemark")
T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidemark`` script."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tidemark: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, handler: object, help_text: str, parent: argparse._SubParsersAction | None = None
    ) -> argparse.ArgumentParser:
        p = (parent or sub).add_parser(name, help=help_text, description=help_text)
        p.add_argument("--config", help="configuration file (default: tidemark.yaml)")
        p.set_defaults(handler=handler)
        return p

    command("process", _process, "run the stream processor (a Faust worker)")
    sink = command("sink", _sink, "merge reconciled topics into Iceberg tables (Spark)")
    sink.add_argument(
        "--once", action="store_true", help="drain every topic to its current end, then exit"
    )
    sink_sub = sink.add_subparsers(dest="sink_command")
    maintain = command(
        "maintain",
        _sink_maintain,
        "maintain the sink's tables once: compact files, rewrite manifests, expire old "
        "snapshots, remove old orphan files",
        sink_sub,
    )
    maintain.add_argument(
        "--sink-stopped",
        action="store_true",
        help="the sink is not running (required on a hadoop catalog)",
    )
    executor = sink_sub.add_parser(
        "executor",
        help="run a Spark executor (the command of the sink's executor pods on Kubernetes)",
        description="Run a Spark executor from the variables Spark on Kubernetes sets on "
        "the pods it makes: the command of k8s/spark-cluster's executor pod template.",
    )
    executor.set_defaults(handler=_sink_executor)
    demo = command("demo", _demo, "run the whole pipeline on embedded components and verify it")
    demo.add_argument("--run-dir", default=".tidemark/demo", help="folder for logs and data")

    snap = sub.add_parser("snapshot", help="incremental snapshots (backfills) of source tables")
    snap_sub = snap.add_subparsers(dest="snapshot_command", required=True)
    start = command("start", _snapshot_start, "backfill tables (schema.table), in order", snap_sub)
    start.add_argument(
        "tables", nargs="+", metavar="TABLE", help="a table to backfill (schema.table)"
    )
    start.add_argument(
        "--filter",
        nargs=2,
        action="append",
        default=[],
        metavar=("TABLE", "SQL"),
        help="read only the rows of TABLE that match SQL (Debezium's additional-conditions)",
    )
    start.add_argument("--surrogate-key", help="a unique column to chunk by instead of the key")
    start.add_argument("--id", default="", help="the request's id (default: a new UUID)")
    start.add_argument(
        "--wait",
        action="store_true",
        help="return once every table of the request completed or was aborted "
        "(exit code 1 if any was aborted)",
    )
    stop = command("stop", _snapshot_stop, "stop the snapshot of tables (none: of all)", snap_sub)
    stop.add_argument(
        "tables", nargs="*", metavar="TABLE", help="a table whose snapshot stops (schema.table)"
    )
    command("pause", _snapshot_pause, "stop reading chunks; progress is kept", snap_sub)
    command("resume", _snapshot_resume, "read chunks again after a pause", snap_sub)
    reset = command(
        "reset-progress",
        _snapshot_reset_progress,
        "replace an unreadable progress record with an empty one (queued backfills are forgotten)",
        snap_sub,
    )
    reset.add_argument("--yes", action="store_true", help="do it (without: say what it does)")
    command(
        "sign-progress",
        _snapshot_sign_progress,
        "sign the progress record with the record key (after the key was turned on)",
        snap_sub,
    )
    status = command("status", _snapshot_status, "progress per table", snap_sub)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", type=float, metavar="SECONDS", help="print again every SECONDS")

    pipe = sub.add_parser("pipeline", help="stop, pause, resume every instance of the pipeline")
    pipe_sub = pipe.add_subparsers(dest="pipeline_command", required=True)
    for action, text in (
        ("stop", "data planes leave their consumer group (offsets can then be written)"),
        ("pause", "data planes keep their partitions and read nothing"),
        ("resume", "data planes run again"),
    ):
        _remote(command(action, _pipeline_action, text, pipe_sub)).set_defaults(action=action)
    pstatus = _remote(command("status", _pipeline_status, "lifecycle and group members", pipe_sub))
    pstatus.add_argument("--json", action="store_true", help="print JSON")

    offsets = sub.add_parser("offsets", help="read and write the pipeline's offsets (DDD-4)")
    off_sub = offsets.add_subparsers(dest="offsets_command", required=True)
    _remote(command("get", _offsets_get, "print the offsets document (JSON)", off_sub))
    oset = _remote(command("set", _offsets_set, "set the offsets a document lists", off_sub))
    oset.add_argument("file", help="offsets document (JSON; - for stdin)")
    oset.add_argument(
        "--replace", action="store_true", help="the document lists every offset (PUT)"
    )
    oreset = _remote(
        command("reset", _offsets_reset, "move offsets to the beginning, end or a time", off_sub)
    )
    oreset.add_argument(
        "--to",
        required=True,
        choices=["beginning", "end", "timestamp"],
        help="move them to the beginning, the end, or the first record at or after --timestamp",
    )
    oreset.add_argument("--timestamp", type=int, help="epoch milliseconds, with --to timestamp")
    oreset.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    odelete = _remote(command("delete", _offsets_delete, "forget every offset", off_sub))
    for writer in (oset, oreset, odelete):
        writer.add_argument(
            "--reset-state",
            action="store_true",
            help="delete the state of the partitions written: the replay rebuilds it",
        )

    tables = sub.add_parser("tables", help="the pipeline's tables")
    tables_sub = tables.add_subparsers(dest="tables_command", required=True)
    remove = command(
        "remove",
        _tables_remove,
        "delete a table's topics, positions and state, once the source no longer has "
        "it and no backfill of it is unfinished; the pipeline runs on",
        tables_sub,
    )
    remove.add_argument("table", metavar="TABLE", help="the table (schema.table)")
    remove.add_argument(
        "--output",
        action="store_true",
        help="delete its reconciled (output) topic too; the sink's table is not touched",
    )
    remove.add_argument(
        "--force",
        action="store_true",
        help="remove it although the source still has it and Debezium captures it",
    )
    remove.add_argument(
        "--wait",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long the instances have to release its partitions (120)",
    )
    remove.add_argument(
        "--cancel",
        action="store_true",
        help="take back a removal that did not finish: the instances read the table again",
    )

    acls = command(
        "kafka-acls",
        _kafka_acls,
        "print the kafka-acls.sh commands that grant each component what it needs",
    )
    acls.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="COMPONENT=PRINCIPAL",
        help="e.g. processor=User:tidemark (debezium, processor, sink, operator; "
        "repeatable; default: User:<component>)",
    )

    sbom = sub.add_parser(
        "sbom", help="print a software bill of materials of this environment (CycloneDX JSON)"
    )
    sbom.add_argument("--lock", help="the lock file it was installed from: each file's hash")
    sbom.set_defaults(handler=_sbom)

    dev = sub.add_parser("dev", help="the embedded development stack")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    up = command("up", _dev_up, "start broker, PostgreSQL and Debezium", dev_sub)
    up.add_argument("--run-dir", help="folder for the stack (default: dev.run_dir)")
    down = command("down", _dev_down, "stop everything 'dev up' started", dev_sub)
    down.add_argument("--run-dir", help="folder of the stack (default: dev.run_dir)")
    command("debezium", _dev_debezium, "run the Debezium bridge in the foreground", dev_sub)
    command(
        "repair-groups",
        _dev_repair_groups,
        "unwedge the pipeline's consumer groups on the embedded broker (a lost leader)",
        dev_sub,
    )
    psql = command("psql", _dev_psql, "psql on the stack's database, as its owner", dev_sub)
    psql.add_argument(
        "-c",
        "--command",
        action="append",
        default=[],
        dest="commands",
        metavar="SQL",
        help="run SQL and exit (repeatable, in order); none: an interactive session",
    )
    wait = command(
        "wait",
        _dev_wait,
        "wait until every change committed so far went through Debezium and the processor",
        dev_sub,
    )
    wait.add_argument(
        "--timeout", type=float, default=180.0, help="seconds before giving up (exit code 2)"
    )
    compare = command(
        "compare",
        _dev_compare,
        "compare source tables with their Iceberg tables (exit code 1 if any differs)",
        dev_sub,
    )
    compare.add_argument(
        "tables", nargs="+", metavar="TABLE", help="a table to compare (schema.table)"
    )
    return parser


def _remote(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--api",
        metavar="URL",
        help="go through a processor's API (e.g. http://host:6066; token from "
        "TIDEMARK_API_TOKEN) instead of directly through Kafka",
    )
    return parser


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config)


def _run_dir(args: argparse.Namespace, config: Config) -> Path:
    return Path(args.run_dir or config.dev.run_dir)


def _process(args: argparse.Namespace) -> int:
    config = _config(args)
    from processor.app import run_worker

    return run_worker(config)


def _kafka_acls(args: argparse.Namespace) -> int:
    from tidemark.core.acls import PRINCIPALS, commands, grants

    config = _config(args)
    principals = {name: f"User:{name}" for name in PRINCIPALS}
    for given in args.principal:
        component, _, principal = given.partition("=")
        if component not in PRINCIPALS or not principal:
            raise TidemarkError(f"--principal {given}: COMPONENT=PRINCIPAL, of {PRINCIPALS}")
        principals[component] = principal
    print("\n\n".join(commands(grants(config), principals, config.kafka.bootstrap_servers)))
    return 0


def _sbom(args: argparse.Namespace) -> int:
    import json

    from tidemark.cli.sbom import bom, lock_of

    print(json.dumps(bom(lock_of(args.lock)), indent=1))
    return 0


def _sink(args: argparse.Namespace) -> int:
    config = _config(args)
    from spark_sink.job import run_sink

    return run_sink(config, once=args.once)


def _sink_maintain(args: argparse.Namespace) -> int:
    config = _config(args)
    from spark_sink.maintain import maintain

    failed = 0
    for done in maintain(config, sink_stopped=args.sink_stopped):
        print(
            f"{done.table}: {done.rewritten_files} files compacted into {done.added_files}, "
            f"{done.expired_snapshots} snapshots expired ({done.deleted_files} files deleted), "
            f"{done.rewritten_delete_files} delete files and {done.rewritten_manifests} "
            f"manifests rewritten, {done.orphan_files} orphan files removed"
        )
        for step, reason in done.conflicted.items():
            print(f"{done.table}: {step} met concurrent commits, not done: {reason}")
        for step, reason in done.failed.items():
            print(f"{done.table}: {step} failed: {reason}", file=sys.stderr)
        failed += bool(done.failed)
    return 1 if failed else 0


def _sink_executor(args: argparse.Namespace) -> int:
    from spark_sink.executor import run_executor

    run_executor()
    return 1  # not reached: the executor's JVM replaced this process


def _demo(args: argparse.Namespace) -> int:
    config = _config(args)
    from tidemark.cli.demo import run_demo

    return run_demo(config, Path(args.run_dir))


def _signal(args: argparse.Namespace, kind: str, data: dict[str, object]) -> int:
    _send(args, kind, data)
    return 0


def _send(args: argparse.Namespace, kind: str, data: dict[str, object]) -> tuple[Config, str]:
    """Write a signal to the pipeline's signal topic and say so; the configuration and the
    request's id."""
    from processor.snapshot.client import send_signal

    config = _config(args)
    request = _audited(
        config,
        f"snapshot {kind}",
        data,
        lambda: send_signal(config, kind, data, getattr(args, "id", "")),
    )
    print(f"{kind} sent to pipeline {config.processor.pipeline}: request {request}")
    return config, request


def _snapshot_start(args: argparse.Namespace) -> int:
    data: dict[str, object] = {"data-collections": args.tables, "type": "incremental"}
    if args.filter:
        data["additional-conditions"] = [
            {"data-collection": table, "filter": sql} for table, sql in args.filter
        ]
    if args.surrogate_key:
        data["surrogate-key"] = args.surrogate_key
    if not args.wait:
        return _signal(args, "execute-snapshot", data)
    from tidemark.cli.snapshot_status import render_tables, wait_for_request

    config, request = _send(args, "execute-snapshot", data)
    tables = wait_for_request(config, request)
    print(render_tables(tables))
    return 1 if any(t.error is not None for t in tables) else 0


def _snapshot_stop(args: argparse.Namespace) -> int:
    return _signal(args, "stop-snapshot", {"data-collections": args.tables, "type": "incremental"})


def _snapshot_pause(args: argparse.Namespace) -> int:
    return _signal(args, "pause-snapshot", {"type": "incremental"})


def _snapshot_resume(args: argparse.Namespace) -> int:
    return _signal(args, "resume-snapshot", {"type": "incremental"})


def _snapshot_reset_progress(args: argparse.Namespace) -> int:
    from processor.snapshot.progress_reset import reset_progress

    config = _config(args)
    if not args.yes:
        print(
            "This replaces the snapshot progress record of pipeline "
            f"{config.processor.pipeline!r} with an empty one: queued and running backfills "
            "are forgotten, and signals written before now are not carried out. "
            "Run again with --yes to do it."
        )
        return 1
    state = _audited(config, "snapshot reset-progress", None, lambda: reset_progress(config))
    print(f"progress reset: chunk numbers go on from {state.chunk_sequence + 1}")
    return 0


def _snapshot_sign_progress(args: argparse.Namespace) -> int:
    from processor.snapshot.progress_reset import sign_progress

    config = _config(args)
    state = _audited(config, "snapshot sign-progress", None, lambda: sign_progress(config))
    print(f"progress record signed: {len(state.pending())} tables queued or being read")
    return 0


def _snapshot_status(args: argparse.Namespace) -> int:
    import json

    from processor.snapshot.client import read_state, status_document
    from tidemark.cli.snapshot_status import render_status, watch

    config = _config(args)
    if args.watch:
        watch(config, args.watch)
        return 0
    state = read_state(config)
    if args.json:
        print(json.dumps(status_document(state) if state else None, indent=2))
    else:
        print(render_status(state))
    return 0


def _print_json(document: object) -> None:
    import json

    print(json.dumps(document, indent=2))


def _pipeline_action(args: argparse.Namespace) -> int:
    from processor.pipeline.control_topic import Lifecycle, set_lifecycle

    config = _config(args)
    pipeline = config.processor.pipeline
    if args.api:
        from tidemark.cli.api_client import call

        call(args.api, "POST", f"/pipelines/{pipeline}/{args.action}")
    else:
        states = {"stop": Lifecycle.STOPPED, "pause": Lifecycle.PAUSED, "resume": Lifecycle.RUNNING}
        _audited(
            config,
            f"pipeline {args.action}",
            None,
            lambda: set_lifecycle(config, states[args.action], "cli"),
        )
    print(f"pipeline {pipeline}: {args.action} asked of every instance")
    return 0


def _pipeline_status(args: argparse.Namespace) -> int:
    from processor.pipeline.control_topic import read_control
    from processor.pipeline.offsets import Offsets

    config = _config(args)
    if args.api:
        from tidemark.cli.api_client import call

        status = call(args.api, "GET", f"/pipelines/{config.processor.pipeline}/status")
    else:
        offsets = Offsets(config)
        status = {
            "pipeline": offsets.pipeline,
            "lifecycle": read_control(config).lifecycle.value,
            "members": offsets.members(),
        }
    if args.json:
        _print_json(status)
    else:
        print(", ".join(f"{k}: {v}" for k, v in status.items()))
    return 0


def _offsets(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: object,
    direct: Callable[[Offsets, bool], object],
) -> int:
    """Run an offsets command through the API (``--api``: ``method path`` with ``body``) or
    directly (``direct(offsets, reset_state)``); print its JSON."""
    from processor.pipeline.offsets import Offsets

    config = _config(args)
    reset = getattr(args, "reset_state", False)
    if args.api:
        from tidemark.cli.api_client import call

        query = "?reset_state=true" if reset and method in ("PUT", "PATCH", "DELETE") else ""
        url = f"/pipelines/{config.processor.pipeline}/offsets{path}{query}"
        _print_json(call(args.api, method, url, body))
    elif method == "GET":
        _print_json(direct(Offsets(config), reset))
    else:
        action = f"offsets {method} {path or '/'}" + (" reset_state" if reset else "")
        _print_json(_audited(config, action, body, lambda: direct(Offsets(config), reset)))
    return 0


def _audited(config: Config, action: str, detail: object, work: Callable[[], T]) -> T:
    """Do ``work``, an order the CLI gives through Kafka directly, and record it in the
    audit trail (:mod:`processor.pipeline.audit`), done or refused. Through ``--api`` the
    processor records it."""
    from processor.pipeline.audit import AuditWriter, cli_operator, entry

    writer = AuditWriter(config)
    try:
        done = work()
    except TidemarkError as exc:
        writer.record(entry("cli", cli_operator(), action, 2, str(exc), detail))
        raise
    writer.record(entry("cli", cli_operator(), action, 0, None, detail))
    return done


def _offsets_get(args: argparse.Namespace) -> int:
    return _offsets(args, "GET", "", None, lambda o, _reset: o.read())


def _offsets_set(args: argparse.Namespace) -> int:
    import json

    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TidemarkError(f"{args.file} is not JSON: {exc}") from None
    return _offsets(
        args,
        "PUT" if args.replace else "PATCH",
        "",
        body,
        lambda o, reset: o.write(body, replace=args.replace, reset_state=reset),
    )


def _offsets_reset(args: argparse.Namespace) -> int:
    body = {"to": args.to, "timestamp": args.timestamp, "topics": args.topic or None}
    if args.api:
        body["reset_state"] = args.reset_state
    return _offsets(
        args,
        "POST",
        "/reset",
        body,
        lambda o, reset: o.reset(
            args.to, timestamp_ms=args.timestamp, topics=args.topic or None, reset_state=reset
        ),
    )


def _offsets_delete(args: argparse.Namespace) -> int:
    return _offsets(args, "DELETE", "", None, lambda o, reset: o.delete(reset_state=reset))


def _tables_remove(args: argparse.Namespace) -> int:
    from processor.pipeline.table_removal import cancel_removal, remove_table

    config = _config(args)
    if args.cancel:
        _audited(
            config, "tables remove --cancel", {"table": args.table},
            lambda: cancel_removal(config, args.table),
        )  # fmt: skip
        _print_json({"table": args.table, "cancelled": True})
        return 0
    detail = {"table": args.table, "output": args.output, "force": args.force}
    removal = _audited(
        config,
        "tables remove",
        detail,
        lambda: remove_table(
            config, args.table, with_output=args.output, force=args.force, wait_s=args.wait
        ),
    )
    _print_json(removal.summary())
    return 0


def _dev_up(args: argparse.Namespace) -> int:
    from tidemark.devstack.stack import DevStack

    config = _config(args)
    stack = DevStack(_run_dir(args, config), config)
    path = stack.up()
    print(f"development stack is up; configuration: {path}")
    print(f"  Kafka:      {stack.config.kafka.bootstrap_servers}")
    print(
        f"  PostgreSQL: {stack.config.source.host}:{stack.config.source.port}"
        f"/{stack.config.source.dbname} (user {stack.config.source.user})"
    )
    print(f"  stop with:  tidemark dev down --run-dir {stack.run_dir}")
    return 0


def _dev_down(args: argparse.Namespace) -> int:
    from tidemark.devstack.stack import DevStack

    config = _config(args)
    stopped = DevStack(_run_dir(args, config), config).down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _dev_debezium(args: argparse.Namespace) -> int:
    from tidemark.devstack.debezium import run

    config = load_config(args.config, required=True)
    run(config, Path(config.dev.run_dir))
    return 0


def _dev_psql(args: argparse.Namespace) -> int:
    from tidemark.devstack.postgres import run_psql

    return run_psql(_config(args).owner_conninfo(), args.commands)


def _dev_wait(args: argparse.Namespace) -> int:
    from tidemark.cli.verify import wait_caught_up

    wait_caught_up(_config(args), args.timeout)
    print("caught up: every change committed before this command went through the processor")
    return 0


def _dev_compare(args: argparse.Namespace) -> int:
    from spark_sink.session import create_session, stop_session
    from tidemark.cli.verify import compare_table

    config = _config(args)
    names = [table.partition(".") for table in args.tables]
    if any(not dot for _schema, dot, _table in names):
        raise TidemarkError("name each table as schema.table")
    spark = create_session(config)
    try:
        results = [compare_table(config, spark, schema, table) for schema, _, table in names]
    finally:
        stop_session(spark)
    for name, result in zip(args.tables, results, strict=True):
        if result.equal:
            print(f"{name}: equal ({result.source_rows} rows)")
        else:
            print(
                f"{name}: DIFFERENT: {result.source_rows} rows in the source, "
                f"{result.lake_rows} in Iceberg; {result.missing} missing, {result.extra} extra, "
                f"{result.different} different"
            )
    return 0 if all(r.equal for r in results) else 1


def _dev_repair_groups(args: argparse.Namespace) -> int:
    from tidemark.core.group_repair import repair_pipeline_groups

    config = _config(args)
    repaired = repair_pipeline_groups(config)
    for group, leader in repaired.items():
        print(f"{group}: " + (f"lost leader {leader} set to expire" if leader else "not wedged"))
    return 0
