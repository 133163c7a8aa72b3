"""The web view's defences that do not need a token: DNS rebinding and cross-site requests.

Without a token the view answers anyone who reaches its port, and a browser reaches it on the
user's behalf from any page (issue 39: a page on another loopback origin started a sweep with a
``text/plain`` ``no-cors`` POST; ``Host: evil.example`` was answered). So, as the WHATWG Fetch
standard's CORS rules make it possible:

- **Host** (no token configured): the request's ``Host`` must name this server: an IP literal,
  ``localhost`` (or a name under ``.localhost``, RFC 6761), this machine's own name, or a name in
  ``web.allowed_hosts`` (what a proxy or DNS calls it). A page on ``evil.example`` whose name
  was re-pointed at 127.0.0.1 (DNS rebinding) sends ``Host: evil.example``: 403.
- **State-changing requests** (any method but GET, HEAD and OPTIONS; the login form excepted),
  token or not: a ``Content-Type`` of JSON or YAML, or an ``X-Twin-Request`` header. Neither is
  a "CORS-safelisted" request a page may send to another origin without a preflight, and no
  preflight is ever answered here, so another origin's page cannot send one at all.
- **Origin** (token or not, on those requests and the login form): when the browser says which
  page sent it (``Origin``, or ``Sec-Fetch-Site``), it must be this origin: ``Origin``'s host and
  port those of the ``Host`` header. ``http://127.0.0.1:9999`` posting to ``127.0.0.1:8080`` is
  another origin (same site, so a SameSite cookie alone does not stop it): 403.

With a token the token decides who may read and act (``twin.web.cookie_auth``), as before; the
Host check is then not needed (a rebinding page has no token) and is not made, so a proxy may
give the view any name. Refusals are 403 with the JSON error body the API uses, naming the header.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from twin.web.cookie_auth import Asgi, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Media types that make a cross-origin request need a CORS preflight (not text/plain, form data).
BODY_TYPES = frozenset({"application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
MARKER = "x-twin-request"  # the header the pages' own script sends with every request (twin.js)
FORM_PATHS = ("/login",)  # a plain HTML form posts here: Origin checked, no marker needed


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers") or ():
        out.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _split_host(value: str) -> tuple[str, int | None]:
    """(host, port) of a ``Host`` header or an origin's authority; ("", None) when it is not one."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "").rstrip(".").lower(), parts.port
    except ValueError:
        return "", None


def own_names(bound_host: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """Names that mean this server: ``allowed``, the bound host when it is a name, this machine's names."""
    names = {a.strip().lower().rstrip(".") for a in allowed if a.strip()}
    names.add(bound_host.strip("[]").lower())
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower().rstrip("."))
    names.discard("")
    return frozenset(names)


def host_allowed(host: str, names: frozenset[str]) -> bool:
    """Whether ``host`` (no port) names this server (see the module's rules)."""
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return host == "localhost" or host.endswith(".localhost") or host in names


class RequestGuard:
    """ASGI middleware around the app (inside the token check): the rules of this module."""

    def __init__(self, app: Asgi, *, check_host: bool, names: frozenset[str]) -> None:
        self.app = app
        self.check_host = check_host
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self.problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        field, rule = problem
        await JSONResponse({"error": {"code": "PERMISSION_DENIED", "field": field, "rule": rule}},
                           status_code=403)(scope, receive, send)

    def problem(self, scope: Scope) -> tuple[str, str] | None:
        """(the header, why) when the request is refused, else None."""
        headers = _headers(scope)
        host, port = _split_host(headers.get("host", ""))
        if self.check_host and not host_allowed(host, self.names):
            return "host", (f"Host {headers.get('host', '')[:100]!r} does not name this server; open it by its "
                            "address, or add the name to web.allowed_hosts")
        method = scope.get("method", "GET").upper()
        path = scope.get("path", "")
        if method in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None and origin != "null":
            o = urlsplit(origin)
            o_host, o_port = _split_host(o.netloc)
            default = {"http": 80, "https": 443}.get(o.scheme)
            if (o_host, o_port or default) != (host, port or default):
                return "origin", f"a request from {origin[:100]!r} to this view is refused: another origin"
        elif origin == "null" or headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "origin", "a request from another origin (Sec-Fetch-Site) is refused"
        if path in FORM_PATHS:
            return None
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media not in BODY_TYPES and MARKER not in headers:
            return "content-type", (f"{method} {path[:100]} needs a JSON or YAML Content-Type or an X-Twin-Request "
                                    "header (what the pages send); a plain form or text post is refused")
        return None


def guard(app: Any, token: str | None, bound_host: str, allowed_hosts: Iterable[str] = ()) -> RequestGuard:
    """``app`` behind the guard; the Host rule only without a ``token``."""
    return RequestGuard(app, check_host=token is None, names=own_names(bound_host, allowed_hosts))
