"""The management API under ``/api/v1`` on the processor's web port: snapshot control and status.

Every request needs a bearer token, which :mod:`processor.web.guard` checks in
front of every route of the web port (only ``/health`` and ``/metrics`` stay open),
so the views here take it as given. Its document is ``/api/v1/openapi.json``.

Snapshot control goes through the pipeline's signal topic, the same path as
signals and ``tidemark snapshot``, so it reaches whichever instance coordinates
snapshots and behaves exactly as a signal does. Kafka calls block, so they run
in the event loop's executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from aiohttp.web import HTTPRequestEntityTooLarge
from faust import App
from faust.web import Request, Response, View

from processor.dataplane.loop import DataPlane
from processor.errors import (
    BadRequestError,
    FilterError,
    InvalidOffsetsError,
    OperatorOnlyError,
    PipelineActiveError,
    RequestTooLargeError,
    SignalError,
)
from processor.history import History
from processor.openapi import ACTIONS, BODIES, LIFECYCLE_ACTIONS, OPENAPI, PREFIX
from processor.pipeline.audit import MAX_ENTRIES as MAX_AUDIT_ENTRIES
from processor.pipeline.audit import read_audit
from processor.pipeline.control_topic import Lifecycle, set_lifecycle
from processor.pipeline.dead_letters import MAX_LIMIT as MAX_DEAD_LETTERS
from processor.pipeline.dead_letters import Query, ReadsBusyError, read_dead_letters
from processor.pipeline.instances import holders, read_instances
from processor.pipeline.offsets import Offsets
from processor.pipeline.offsets_schema import schema_error
from processor.pipeline.sink_status import read_sink_status
from processor.snapshot.chunk_reader import ChunkReader
from processor.snapshot.client import (
    MAX_NOTIFICATIONS,
    read_notifications,
    read_state,
    send_signal,
    status_document,
)
from processor.snapshot.connector import Connector
from processor.snapshot.coordinator import Coordinator
from processor.snapshot.filters import refused_filters
from processor.snapshot.signals import ExecuteSnapshot, json_object, parse_signal
from processor.web.viewers import shown_to
from processor.web.who import ROLE, recorded
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError

#: The parameters of ``GET .../dead-letters``.
DEAD_LETTER_PARAMS = {"table", "kind", "limit", "whole"}
#: The largest request body the API reads: a signal, an offsets document (413 above).
MAX_BODY_BYTES = 1024 * 1024

T = TypeVar("T")
#: A view method: the view, the request and the route's parts.
Handler = Callable[..., Awaitable[Response]]


async def body_of(request: Request, schema: str | None = None) -> dict[str, Any]:
    """The request's JSON object body, checked against the OpenAPI schema ``schema``."""
    too_large = RequestTooLargeError(f"the body is larger than {MAX_BODY_BYTES} bytes")
    length = request.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise too_large
    try:
        raw = await request.read()  # aiohttp reads no more than MAX_BODY_BYTES either
    except HTTPRequestEntityTooLarge:
        raise too_large from None
    try:
        given = json_object(raw, "the body")
    except SignalError as exc:
        raise BadRequestError(str(exc)) from None
    wrong = schema_error(BODIES[schema], given) if schema else None
    if wrong is not None:
        raise BadRequestError(wrong)
    return given


def query_params(params: Mapping[str, str], allowed: set[str], most: int) -> dict[str, Any]:
    """A GET request's parameters, each of ``allowed``: ``limit`` a whole number from 1 to
    ``most`` (100, or ``most`` if less, when not given), ``whole`` true or false, any
    other a string (``None`` if not given or empty); :class:`BadRequestError` for one not
    allowed or a bad value."""
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise BadRequestError(f"unknown parameters: {', '.join(unknown)}")
    found: dict[str, Any] = {name: params.get(name) or None for name in allowed}
    limit = params.get("limit", str(min(100, most)))
    if not _whole_number(limit) or not 1 <= int(limit) <= most:
        raise BadRequestError(f"limit: a whole number from 1 to {most}, not {limit!r}")
    found["limit"] = int(limit)
    whole = params.get("whole", "false").lower()
    if whole not in ("true", "false"):
        raise BadRequestError(f"whole: true or false, not {whole!r}")
    found["whole"] = whole == "true"
    return found


def _whole_number(text: str) -> bool:
    """Whether ``text`` is a whole number in ASCII digits (``"²"`` is a digit to
    ``str.isdigit`` but not to ``int``)."""
    return text.isascii() and text.isdigit()


def instance_status(
    pipeline: str, dataplane: DataPlane, coordinator: Coordinator
) -> dict[str, Any]:
    """This instance's data plane and snapshot coordinator (also what it reports of itself,
    :mod:`processor.pipeline.instances`)."""
    failure = dataplane.failure or coordinator.failure
    running = "running" if dataplane.running else "stopped"
    return {
        "pipeline": pipeline,
        "dataplane": "failed" if failure else running,
        "lifecycle": dataplane.lifecycle.value,
        "error": str(failure) if failure else None,
        "assigned_partitions": [
            {"topic": t, "partition": p} for t, p in sorted(dataplane.assigned)
        ],
        "released_for_removal": dataplane.released_for_removal,
        "refused_topics": dict(dataplane.refused),
        "refused_partitions": [
            {"topic": t, "partition": p, "reason": reason}
            for (t, p), reason in sorted(dataplane.reconciler.refused_partitions.items())
        ],
        "snapshots": coordinator.role,
        "snapshots_refused": coordinator.refused,
    }


def register_api(
    app: App,
    config: Config,
    dataplane: DataPlane,
    coordinator: Coordinator,
    connector: Connector,
    history: History,
) -> None:
    """Add the ``/api/v1`` views to ``app`` (``connector``: the source's, to plan filters;
    ``history``: this instance's recent figures)."""
    pipeline = config.processor.pipeline

    async def blocking(call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def answer(view: View, work: Callable[[], Awaitable[Any]], status: int = 200) -> Response:
        """``work``'s result as JSON, or the error it raised: 400 for a bad request, 409 for
        a write to a running pipeline, 403 for a read the viewer may not make, 413 for a
        body too large, 503 when Kafka could not
        do it or the reads the process holds are busy (with ``Retry-After``)."""
        try:
            return view.json(await work(), status=status)
        except (BadRequestError, SignalError, FilterError, InvalidOffsetsError) as exc:
            return view.error(400, str(exc))
        except PipelineActiveError as exc:
            return view.error(409, str(exc))
        except RequestTooLargeError as exc:
            return view.error(413, str(exc))
        except OperatorOnlyError as exc:
            return view.error(403, str(exc))
        except ReadsBusyError as exc:
            headers = {"Retry-After": str(exc.retry_after_s)}
            return view.json({"error": str(exc)}, status=503, headers=headers)
        except TidemarkError as exc:
            return view.error(503, str(exc))

    async def signal(
        view: View, request: Request, kind: str, body: str, **defaults: Any
    ) -> Response:
        """Send the signal ``kind``, the request's body (OpenAPI schema ``body``) its data.
        A snapshot's filters are planned by the source first: a refused one is a 400."""

        async def send() -> dict[str, str]:
            data = {**defaults, **await body_of(request, body)}
            if kind == "execute-snapshot":
                await blocking(lambda: plan_filters(data))
            request_id = await blocking(lambda: send_signal(config, kind, data))
            return {"request_id": request_id, "signal": kind}

        return await answer(view, send, 202)

    def plan_filters(data: dict[str, Any]) -> None:
        signal = parse_signal("api", "execute-snapshot", orjson.dumps(data))
        assert isinstance(signal, ExecuteSnapshot)
        if not signal.conditions:
            return
        readers: list[ChunkReader] = []

        def reader() -> ChunkReader:
            if not readers:
                readers.append(connector.chunk_reader())
            return readers[0]

        try:
            refused = refused_filters(signal.conditions, reader)
        finally:
            for opened in readers:
                opened.close()
        if refused:
            raise BadRequestError("; ".join(refused.values()))

    async def offsets(view: View, call: Callable[[Offsets], Any]) -> Response:
        """Answer with ``call``'s result on the pipeline's offsets."""
        return await answer(view, lambda: blocking(lambda: call(Offsets(config))))

    def other(view: View, name: str) -> Response | None:
        if name == pipeline:
            return None
        return view.error(404, f"this processor runs pipeline {pipeline!r}, not {name!r}")

    def reset_state(request: Request) -> bool:
        return request.query.get("reset_state", "false").lower() in ("true", "1", "yes")

    @app.page(f"{PREFIX}/openapi.json")
    class OpenApi(View):
        async def get(self, request: Request) -> Response:
            return self.json(OPENAPI)

    @app.page(f"{PREFIX}/pipelines/{{name}}/status")
    class PipelineStatus(View):
        async def get(self, request: Request, name: str) -> Response:
            return other(self, name) or self.json(instance_status(pipeline, dataplane, coordinator))

    @app.page(f"{PREFIX}/pipelines/{{name}}/offsets")
    class PipelineOffsets(View):
        async def get(self, request: Request, name: str) -> Response:
            return other(self, name) or await offsets(self, lambda o: shown_to(request, o.read()))

        async def put(self, request: Request, name: str) -> Response:
            return other(self, name) or await self._write(request, replace=True)

        async def patch(self, request: Request, name: str) -> Response:
            return other(self, name) or await self._write(request, replace=False)

        async def delete(self, request: Request, name: str) -> Response:
            reset = reset_state(request)
            return other(self, name) or await offsets(self, lambda o: o.delete(reset_state=reset))

        async def _write(self, request: Request, replace: bool) -> Response:
            reset = reset_state(request)

            async def write() -> Any:
                body = await body_of(request)
                return await blocking(
                    lambda: Offsets(config).write(body, replace=replace, reset_state=reset)
                )

            return await answer(self, write)

    @app.page(f"{PREFIX}/pipelines/{{name}}/offsets/reset")
    class PipelineOffsetsReset(View):
        async def post(self, request: Request, name: str) -> Response:
            if refused := other(self, name):
                return refused

            async def reset() -> Any:
                body = await body_of(request, "Reset")
                return await blocking(
                    lambda: Offsets(config).reset(
                        body["to"],
                        timestamp_ms=body.get("timestamp"),
                        topics=body.get("topics"),
                        reset_state=body.get("reset_state", False),
                    )
                )

            return await answer(self, reset)

    def pipeline_read(read: Callable[[Request], Any]) -> type[View]:
        """A GET view of the pipeline's that answers ``read(request)``, run off the event
        loop (it reads Kafka), or the error it raised."""

        class PipelineRead(View):
            async def get(self, request: Request, name: str) -> Response:
                if refused := other(self, name):
                    return refused
                return await answer(self, lambda: blocking(lambda: read(request)))

        return PipelineRead

    def instances(_request: Request) -> dict[str, Any]:
        found = read_instances(config)
        return {"instances": found, "partitions": holders(found)}

    def dead_letters(request: Request) -> dict[str, Any]:
        given = query_params(request.query, DEAD_LETTER_PARAMS, MAX_DEAD_LETTERS)
        query = Query(given["table"], given["kind"], given["limit"], given["whole"])
        if query.whole and recorded(request, ROLE) != "operator":
            # a viewer's answer holds no keys nor values: a download would be all nulls
            raise OperatorOnlyError("a download of dead letters (whole=true) is the operator's")
        return shown_to(request, read_dead_letters(config, query))

    def audit(request: Request) -> dict[str, Any]:
        given = query_params(request.query, {"limit", "since"}, MAX_AUDIT_ENTRIES)
        since = given["since"] or "0"
        if not _whole_number(since):
            raise BadRequestError(f"since: epoch ms, not {since!r}")
        return shown_to(request, read_audit(config, given["limit"], int(since)))

    for path, read in (
        ("audit", audit),
        ("instances", instances),
        ("sink", lambda _request: {"tables": read_sink_status(config)}),
        ("dead-letters", dead_letters),
    ):
        app.page(f"{PREFIX}/pipelines/{{name}}/{path}")(pipeline_read(read))

    @app.page(f"{PREFIX}/pipelines/{{name}}/history")
    class PipelineHistory(View):
        async def get(self, request: Request, name: str) -> Response:
            if refused := other(self, name):
                return refused
            unknown = sorted(set(request.query) - {"since"})
            since = request.query.get("since", "0")
            if unknown or not _whole_number(since):
                why = f"unknown parameters: {', '.join(unknown)}" if unknown else "since: epoch ms"
                return self.error(400, why)
            return self.json(history.document(since_ms=int(since)))

    def lifecycle_view(state: Lifecycle) -> type[View]:
        class PipelineAction(View):
            async def post(self, request: Request, name: str) -> Response:
                if refused := other(self, name):
                    return refused

                async def ask() -> dict[str, str]:
                    await blocking(lambda: set_lifecycle(config, state, "api"))
                    return {"pipeline": pipeline, "lifecycle": state.value}

                return await answer(self, ask, 202)

        return PipelineAction

    for action, state in LIFECYCLE_ACTIONS.items():
        app.page(f"{PREFIX}/pipelines/{{name}}/{action}")(lifecycle_view(state))

    @app.page(f"{PREFIX}/snapshots")
    class Snapshots(View):
        async def get(self, request: Request) -> Response:
            state = await blocking(lambda: read_state(config))
            if state is None:
                return self.json({"paused": False, "tables": []})
            return self.json(shown_to(request, status_document(state)))

        async def post(self, request: Request) -> Response:
            return await signal(self, request, "execute-snapshot", "ExecuteSnapshot")

    @app.page(f"{PREFIX}/notifications")
    class Notifications(View):
        async def get(self, request: Request) -> Response:
            async def read() -> Any:
                given = query_params(request.query, {"request", "limit"}, MAX_NOTIFICATIONS)
                found = await blocking(
                    lambda: read_notifications(config, given["request"], given["limit"])
                )
                return shown_to(request, found)

            return await answer(self, read)

    @app.page(f"{PREFIX}/snapshots/{{action}}")
    class SnapshotAction(View):
        async def post(self, request: Request, action: str) -> Response:
            kind = ACTIONS.get(action)
            if kind is None:
                return self.error(404, f"no snapshot action {action!r} (known: {sorted(ACTIONS)})")
            return await signal(self, request, kind, "SnapshotAction", type="incremental")
