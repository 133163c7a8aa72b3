"""The web view's routes (Starlette): four pages, their JSON, the event stream, login.

Pages (``GET``): ``/`` (Fabric), ``/step``, ``/failures``, ``/sweeps``; static files under
``/static``. JSON: ``/api/jobs``, ``/api/fabric?job=&at=``, ``/api/step?job=``,
``/api/failures?job=``, ``/api/sweeps`` (GET list, POST a spec), ``/api/sweeps/load`` (POST a
rows file), ``/api/sweeps/{id}?sort=&order=&limit=`` (GET; DELETE stops it). ``/events``: the
server-sent event stream (``live`` when telemetry changed, ``sweep`` when a sweep moved).
Errors are JSON ``{"error": {"code", "field", "rule"}}`` with the HTTP status of the gRPC
code the shared error table gives (``twin.wire.status_table``): bad input 400, unknown 404, over a
limit 429, refused by :mod:`twin.web.request_guard` (Host, Origin, a state change without JSON or
YAML or the pages' header) 403. Every evaluation runs in a worker thread (``run_in_threadpool``). A
client that goes away before its request body arrives is no error of the server's: logged at
debug level, answered 400 (to nobody).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from twin.core.docload import parse_document
from twin.core.errors import SpecError, TwinError
from twin.web import cookie_auth, request_guard
from twin.web.live import Live
from twin.web.sweep_pages import WebSweeps
from twin.web.views import clean
from twin.wire.status_table import code_for, field_of, rule_of

log = logging.getLogger("twin.web")
STATIC = Path(__file__).parent / "static"
# path -> (page, title, the libraries it draws with); every page is pages/layout.html around pages/PAGE.html.
CYTOSCAPE, CHART = "vendor/cytoscape.min.js", "vendor/chart.umd.min.js"
PAGES = {"/": ("fabric", "Fabric", (CYTOSCAPE,)), "/step": ("step", "Step", (CHART,)),
         "/failures": ("failures", "Failures", (CHART,)), "/sweeps": ("sweeps", "Sweeps and plans", (CHART,))}
# Seconds between the event stream's looks at what changed: twice a second keeps "a link went
# down" on the page within about a second of the telemetry that says so.
POLL_S = 0.5
# A comment line this often keeps proxies and the browser from closing an idle stream (the
# WHATWG HTML standard, "server-sent events": "a comment line ... every 15 seconds or so").
KEEPALIVE_S = 15.0
# Event streams open at once. Each one polls twice a second on a worker thread that shares the
# interpreter with the gRPC service, so a client opening thousands must not slow it: beyond this
# (a few operators' browsers, one stream per open page) a new one is 429 with Retry-After.
MAX_EVENT_STREAMS = 32
# Retry-After of a refused stream: ten of the streams' polls, long enough for a closed page's
# stream to be noticed (within one poll) and freed; the page's script waits as long (twin.js).
EVENT_RETRY_S = 5
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 409,
               "UNAUTHENTICATED": 401}
# A login form's body at most (a token and a path): 64 KiB, 16x the 4 KiB a browser cookie may hold
# (RFC 6265 section 6.1), so no real token is cut.
LOGIN_BYTES = 64 * 1024
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def error_response(err: TwinError) -> JSONResponse:
    """A domain error as JSON with the status its gRPC code maps to."""
    code = code_for(err).name
    return JSONResponse({"error": {"code": code, "field": field_of(err), "rule": rule_of(err)}},
                        status_code=HTTP_STATUS.get(code, 500))


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(clean(data), allow_nan=False), status_code=status, media_type="application/json")


def guarded(fn: Handler) -> Handler:
    """A route whose domain errors become JSON errors (never a traceback)."""
    async def run(request: Request) -> Response:
        try:
            return await fn(request)
        except TwinError as err:
            return error_response(err)
        except ClientDisconnect:  # the client went away mid-body: its business, not an error here
            log.debug("web: %s %s: the client disconnected before its body arrived", request.method,
                      request.url.path)
            return JSONResponse({"error": {"code": "CANCELLED", "field": "body",
                                           "rule": "the client disconnected before sending it"}}, status_code=400)
    return run


def render_page(path: str) -> str:
    """The HTML of the page at ``path`` (a key of :data:`PAGES`)."""
    name, title, libs = PAGES[path]
    layout = (STATIC / "pages" / "layout.html").read_text(encoding="utf-8")
    scripts = "".join(f'<script src="/static/{lib}"></script>\n' for lib in libs)
    body = (STATIC / "pages" / f"{name}.html").read_text(encoding="utf-8")
    return (layout.replace("__TITLE__", title).replace("__LIBS__", scripts).replace("__PAGE__", name)
            .replace("__BODY__", body))


def login_page(message: str = "", status: int = 200, next_path: str = "/") -> HTMLResponse:
    """The login form (also the body of a page's 401)."""
    html = (STATIC / "login.html").read_text(encoding="utf-8")
    return HTMLResponse(html.replace("{{message}}", escape(message)).replace("{{next}}", escape(local(next_path))),
                        status_code=status)


def local(path: str) -> str:
    """``path`` when it is a path on this site, else ``/`` (a login never redirects elsewhere)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


async def unauthorised(scope: Any, receive: Any, send: Any) -> None:
    """401: the login form for a page, JSON for the API and the event stream."""
    path = scope.get("path", "")
    if path.startswith(("/api/", "/events", "/static/")):
        response: Response = JSONResponse({"error": {"code": "UNAUTHENTICATED", "field": "authorization",
                                                     "rule": "missing or wrong token: send 'Authorization: Bearer "
                                                             "<token>' or log in at /login"}}, status_code=401)
    else:
        response = login_page("This twin needs its token.", 401, path)
    response.headers["WWW-Authenticate"] = 'Bearer realm="fabric-twin"'
    await response(scope, receive, send)


def build_app(live: Live, sweeps: WebSweeps, token: str | None, *, secure: bool, max_body: int,
              shutdown: threading.Event, read_rows: Callable[[Path, int | None], Any], bound_host: str = "127.0.0.1",
              allowed_hosts: tuple[str, ...] = ()) -> Any:
    """The ASGI app: routes behind the token check (``token`` None: open) and the request guard
    (:mod:`twin.web.request_guard`: ``bound_host`` and ``allowed_hosts`` name this server).
    """

    async def page(request: Request) -> Response:
        return HTMLResponse(render_page(request.url.path))

    async def login(request: Request) -> Response:
        given = request.query_params.get("token", "")
        next_path = request.query_params.get("next", "/")
        if request.method == "POST":  # the form, urlencoded (read here: Starlette's parser needs python-multipart)
            form = parse_qs((await request.body())[:LOGIN_BYTES].decode("utf-8", errors="replace"))
            given, next_path = form.get("token", [""])[0], form.get("next", ["/"])[0]
        if token is None:
            return RedirectResponse("/", status_code=303)
        if not given:
            return login_page(next_path=next_path)
        if not cookie_auth.token_matches(given, token):
            return login_page("Wrong token.", 401, next_path)
        response = RedirectResponse(local(next_path), status_code=303)
        response.set_cookie(cookie_auth.COOKIE, cookie_auth.session_value(token), httponly=True, samesite="strict",
                            secure=secure, path="/")
        return response

    async def logout(request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(cookie_auth.COOKIE, path="/")
        return response

    @guarded
    async def jobs(request: Request) -> Response:
        return _json({"jobs": await run_in_threadpool(live.jobs)})

    @guarded
    async def fabric(request: Request) -> Response:
        q = request.query_params
        return _json(await run_in_threadpool(live.fabric, q.get("job", ""), q.get("at", "")))

    @guarded
    async def step(request: Request) -> Response:
        return _json(await run_in_threadpool(live.step, request.query_params.get("job", "")))

    @guarded
    async def failures(request: Request) -> Response:
        return _json(await run_in_threadpool(live.failures, request.query_params.get("job", "")))

    async def _body(request: Request, what: str) -> bytes:
        size = int(request.headers.get("content-length") or 0)
        if size > max_body:
            raise SpecError(what, f"is {size:,} bytes, over the limit of {max_body:,} (limits.max_message_bytes)")
        data = await request.body()
        if len(data) > max_body:
            raise SpecError(what, f"is over the limit of {max_body:,} bytes (limits.max_message_bytes)")
        return data

    @guarded
    async def sweep_list(request: Request) -> Response:
        if request.method == "GET":
            return _json({"sweeps": sweeps.listing()})
        text = (await _body(request, "spec")).decode("utf-8", errors="replace")
        spec = parse_document(text, "spec", allow_aliases=False) if text.strip() else None
        if not isinstance(spec, dict):
            raise SpecError("spec", "must be a sweep spec mapping (base, axes; docs/sweeps.md)")
        job = await run_in_threadpool(sweeps.start, spec)
        return _json(job.progress(), 202)

    @guarded
    async def sweep_load(request: Request) -> Response:
        name = request.query_params.get("name", "")
        data = await _body(request, "file")
        job = await run_in_threadpool(sweeps.load, name, data, read_rows)
        return _json(job.progress(), 201)

    @guarded
    async def sweep_one(request: Request) -> Response:
        job_id = request.path_params["id"]
        if request.method == "DELETE":
            return _json(sweeps.cancel(job_id).progress())
        q = request.query_params
        try:
            limit = int(q.get("limit", "500"))
        except ValueError as err:
            raise SpecError("limit", f"must be an integer (got {q.get('limit')!r})") from err
        job = sweeps.get(job_id)
        return _json(await run_in_threadpool(job.table, q.get("sort", job.metric), q.get("order", "asc"), limit))

    streams = [0]  # event streams open now (only the event loop's thread touches it)

    async def events(request: Request) -> Response:
        if streams[0] >= MAX_EVENT_STREAMS:
            return JSONResponse({"error": {"code": "RESOURCE_EXHAUSTED", "field": "events",
                                           "rule": f"{MAX_EVENT_STREAMS} event streams are open (the limit); "
                                                   f"retry in {EVENT_RETRY_S} s"}},
                                status_code=429, headers={"Retry-After": str(EVENT_RETRY_S)})
        streams[0] += 1

        async def counted() -> AsyncIterator[str]:
            try:
                async for chunk in _stream(request, live, sweeps, shutdown):
                    yield chunk
            finally:
                streams[0] -= 1

        return StreamingResponse(counted(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    routes = [Route(path, page) for path in PAGES]
    routes += [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout),
        Route("/api/jobs", jobs),
        Route("/api/fabric", fabric),
        Route("/api/step", step),
        Route("/api/failures", failures),
        Route("/api/sweeps", sweep_list, methods=["GET", "POST"]),
        Route("/api/sweeps/load", sweep_load, methods=["POST"]),
        Route("/api/sweeps/{id}", sweep_one, methods=["GET", "DELETE"]),
        Route("/events", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes)
    return cookie_auth.TokenAuth(request_guard.guard(app, token, bound_host, allowed_hosts), token, unauthorised)


async def _stream(request: Request, live: Live, sweeps: WebSweeps, shutdown: threading.Event
                  ) -> AsyncIterator[str]:
    """``live`` and ``sweep`` events as things change, a comment line when nothing does."""
    yield "retry: 2000\n\n"
    last_live: Any = None
    last_sweep = -1
    quiet = 0.0
    while not shutdown.is_set():
        version = await run_in_threadpool(live.version)
        if version != last_live:
            last_live = version
            await run_in_threadpool(live.sample)
            yield f"event: live\ndata: {json.dumps({'version': list(version)})}\n\n"
            quiet = 0.0
        sv = sweeps.version()
        if sv != last_sweep:
            last_sweep = sv
            yield f"event: sweep\ndata: {json.dumps(clean({'sweeps': sweeps.listing()}), allow_nan=False)}\n\n"
            quiet = 0.0
        if quiet >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet = 0.0
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        quiet += POLL_S
