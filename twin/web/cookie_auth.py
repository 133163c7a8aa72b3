"""The web view's auth: the gRPC service's bearer token, as a header or as a login cookie.

A browser's ``EventSource`` cannot send headers, so besides ``Authorization: Bearer <token>``
the view accepts a cookie set by ``/login`` (``?token=`` or the form). The cookie holds an
HMAC of the token, not the token (HttpOnly, SameSite=Strict, Secure under TLS; SameSite=Strict
is what keeps another site's page from posting a sweep with it). Every comparison is
``hmac.compare_digest``, so timing does not leak how much matched. Without the token every
path but ``/login`` answers 401.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

COOKIE = "twin_session"
OPEN_PATHS = ("/login",)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


def session_value(token: str) -> str:
    """The cookie value for ``token``: HMAC-SHA256 keyed by the token (the token itself never is one)."""
    return hmac.new(token.encode(), b"fabric-twin web session", hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    """Whether ``given`` is ``token`` (constant time)."""
    return hmac.compare_digest(given.encode(), token.encode())


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _cookie(scope: Scope, name: str) -> str:
    for part in _header(scope, b"cookie").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def authorised(scope: Scope, token: str) -> bool:
    """Whether the request carries the token: ``Authorization: Bearer`` or the session cookie."""
    auth = _header(scope, b"authorization")
    if auth and token_matches(auth, f"Bearer {token}"):
        return True
    cookie = _cookie(scope, COOKIE)
    return bool(cookie) and hmac.compare_digest(cookie.encode(), session_value(token).encode())


class TokenAuth:
    """ASGI middleware: 401 for every request without the token (``/login`` excepted)."""

    def __init__(self, app: Asgi, token: str | None, unauthorised: Asgi) -> None:
        self.app = app
        self.token = token
        self.unauthorised = unauthorised

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self.token is None or scope["type"] != "http" or scope.get("path", "") in OPEN_PATHS
                or authorised(scope, self.token)):
            await self.app(scope, receive, send)
            return
        await self.unauthorised(scope, receive, send)
