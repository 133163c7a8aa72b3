"""With a token configured, the web view's pages, JSON and event stream refuse requests without it."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest

from tests.web.harness import LiveTwin, hold_event_streams
from twin.web.cookie_auth import COOKIE, authorised, session_value, token_matches

TOKEN = "s3cret-token-for-the-web-view"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveTwin]:
    twin = LiveTwin(tmp_path_factory.mktemp("web-auth"), token=TOKEN).start(simulate=False)
    twin.register()  # over gRPC, with the token: the pages then have a job to show
    try:
        yield twin
    finally:
        assert twin.stop() == 0


@pytest.mark.parametrize("path", ["/", "/step", "/failures", "/sweeps", "/api/jobs", "/api/fabric", "/api/step",
                                  "/api/sweeps", "/events", "/static/twin.js", "/static/vendor/cytoscape.min.js"])
def test_every_path_answers_401_without_the_token(guarded, path):
    status, _, headers = guarded.get(path)
    assert status == 401
    assert {k.lower(): v for k, v in headers.items()}.get("www-authenticate", "").startswith("Bearer")
    status, _, _ = guarded.get(path, {"Authorization": "Bearer wrong"})
    assert status == 401
    status, _, _ = guarded.get(path, {"Cookie": f"{COOKIE}={session_value('wrong')}"})
    assert status == 401


def test_a_page_without_the_token_is_the_login_form_and_the_api_says_why(guarded):
    status, body, _ = guarded.get("/step")
    assert status == 401 and b'<form method="post" action="/login">' in body
    status, body, _ = guarded.get("/api/step")
    assert status == 401 and b'"UNAUTHENTICATED"' in body and b"Authorization: Bearer" in body


def test_the_bearer_header_opens_pages_json_and_the_event_stream(guarded):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/", auth)[0] == 200
    status, body, _ = guarded.get("/api/jobs", auth)
    assert status == 200 and b"demo-job" in body
    host, port = guarded.serving["listeners"]["web"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/events", headers=auth)
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type", "").startswith("text/event-stream")
        assert response.readline() == b"retry: 2000\n"
    finally:
        conn.close()
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/events")
        assert conn.getresponse().status == 401
    finally:
        conn.close()


def test_login_sets_an_httponly_strict_cookie_the_browser_streams_with(guarded, browser):
    page = browser.new_page()
    response = page.goto(guarded.url + "/login?token=wrong")
    assert response.status == 401
    page.goto(guarded.url + f"/login?token={TOKEN}&next=/step")
    assert page.url == guarded.url + "/step"
    cookie = next(c for c in browser.cookies() if c["name"] == COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != TOKEN
    page.wait_for_function("window.twinStep && window.twinStep.loaded >= 1", timeout=10_000)
    page.wait_for_selector("#live-dot.on", timeout=10_000)  # the EventSource is through, on the cookie
    assert page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read it
    page.goto(guarded.url + "/logout")
    assert all(c["name"] != COOKIE for c in browser.cookies())
    assert page.goto(guarded.url + "/api/jobs").status == 401
    page.close()


def test_the_form_posts_the_token(guarded, browser):
    page = browser.new_page()
    page.goto(guarded.url + "/failures")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_function("window.twinFailures && window.twinFailures.loaded >= 1", timeout=30_000)
    assert page.url == guarded.url + "/failures"
    page.goto(guarded.url + "/logout")
    page.close()


def test_token_checks():
    scope = {"headers": [(b"authorization", b"Bearer abc")]}
    assert authorised(scope, "abc") and not authorised(scope, "abd")
    assert authorised({"headers": [(b"cookie", f"a=1; {COOKIE}={session_value('abc')}".encode())]}, "abc")
    assert not authorised({"headers": [(b"cookie", f"{COOKIE}=abc".encode())]}, "abc")  # the raw token is no session
    assert token_matches("x", "x") and not token_matches("x", "y")


def test_event_streams_beyond_the_limit_are_refused_with_retry_after(guarded):
    """Each stream polls on a thread that shares the interpreter with gRPC: a client opening many
    gets 429 with Retry-After past MAX_EVENT_STREAMS, and a closed stream frees its place."""
    from twin.web.web_app import MAX_EVENT_STREAMS

    auth = {"Authorization": f"Bearer {TOKEN}"}
    conns = hold_event_streams(guarded, MAX_EVENT_STREAMS, auth)  # each one 200, once earlier tests' are freed
    try:
        status, body, headers = guarded.get("/events", auth)
        assert status == 429 and b"event streams are open" in body
        assert {k.lower(): v for k, v in headers.items()}.get("retry-after") == "5"
        assert guarded.get("/api/jobs", auth)[0] == 200  # the rest of the view still answers
        conns.pop().close()
        conns += hold_event_streams(guarded, 1, auth)  # the server sees the close within a poll: a place again
    finally:
        for conn in conns:
            conn.close()
