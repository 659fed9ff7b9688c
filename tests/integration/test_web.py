"""The web view's HTTP side on a real collector: who may read it, its JSON, and ``/live`` (SSE).

The page itself is driven in a real browser in ``test_web_browser.py``; here plain HTTP requests
check the rules a browser relies on (the key, the cookie's flags, Host and Origin) and the SSE
stream's resumption with ``Last-Event-ID``.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from tests.conftest import CollectorProcess
from tests.integration.live_agents import Agent


@pytest.fixture(name="agent")
def _agent(collector: CollectorProcess) -> Iterator[Agent]:
    started = Agent(collector, "web-top")
    yield started
    started.close()


def ui_address(collector: CollectorProcess) -> str:
    result = collector.gz_ia("ui", "--no-browser", check=True)
    return result.stdout.strip()


def request(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_ui_address_key_cookie_and_refusals(collector: CollectorProcess, agent: Agent) -> None:
    """gz-ia ui gives the page with a key; the key buys an HttpOnly SameSite=Strict cookie; no key,
    another Host (DNS rebinding) or another Origin is refused."""
    address = ui_address(collector)
    status = json.loads(collector.gz_ia("status", "--json", check=True).stdout)
    assert status["endpoints"]["ui"] == collector.http_url + "/ui/"
    assert address.startswith(status["endpoints"]["ui"] + "?")
    query = parse_qs(urlsplit(address).query)
    key, root = query["key"][0], query["root"][0]
    assert root == str(collector.root)
    assert key not in json.dumps(status)  # the status report never carries the key
    code, headers, _ = request(collector.http_url, f"/ui/?key={key}&root={root}")
    assert code == 303 and "key=" not in headers["location"]
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and key not in cookie  # derived, not the key
    jar = {"Cookie": cookie.split(";")[0]}
    # The cookie opens the view's reads and nothing else: a write route still asks for the key.
    assert request(collector.http_url, "/v1/logs", jar, method="POST")[0] == 401
    code, headers, body = request(collector.http_url, "/ui/", jar)
    assert code == 200 and b"app.js" in body and "default-src 'self'" in headers["content-security-policy"]
    assert request(collector.http_url, "/ui/")[0] == 403  # no key, no cookie
    assert request(collector.http_url, "/ui/?key=wrong")[0] == 403
    assert (
        request(collector.http_url, "/ui/api/sessions", {**jar, "Host": f"evil.example:{collector.http_port}"})[0]
        == 403
    )
    assert request(collector.http_url, "/ui/api/sessions", {**jar, "Origin": "http://evil.example"})[0] == 403
    assert request(collector.http_url, "/ui/api/sessions", {**jar, "Sec-Fetch-Site": "cross-site"})[0] == 403
    assert request(collector.http_url, "/live", {"Host": f"evil.example:{collector.http_port}"})[0] == 403
    code, _, body = request(collector.http_url, f"/ui/api/sessions?root={root}", jar)
    assert code == 200
    page = json.loads(body)
    rows = {row["session_id"]: row for row in page["sessions"]}
    assert page["total"] == 2 and set(rows) == {"web-top", "web-top-sub"}
    assert rows["web-top"]["status"] == "running" and rows["web-top"]["role"] == "planner"
    assert rows["web-top"]["tokens"] == 1500 and rows["web-top"]["cost_usd"] == 0.0123
    assert rows["web-top-sub"]["status"] == "failed" and rows["web-top-sub"]["agent"] == "codex"
    code, _, body = request(collector.http_url, f"/ui/api/sessions?root={root}&match=status=failed", jar)
    assert [row["session_id"] for row in json.loads(body)["sessions"]] == ["web-top-sub"]
    code, _, body = request(collector.http_url, f"/ui/api/sessions?root={root}&match=nosuch=1", jar)
    assert code == 400
    code, _, body = request(collector.http_url, f"/ui/api/tree?root={root}&session=web-top", jar)
    assert [(node["session_id"], node["depth"]) for node in json.loads(body)["nodes"]] == [
        ("web-top", 0),
        ("web-top-sub", 1),
    ]
    code, _, body = request(collector.http_url, f"/ui/api/events?root={root}&session=web-top&limit=2", jar)
    window = json.loads(body)
    assert [event["seq"] for event in window["events"]] == [2, 3] and window["older"]
    code, _, body = request(
        collector.http_url, f"/ui/api/events?root={root}&session=web-top&before={window['older']}", jar
    )
    assert [event["seq"] for event in json.loads(body)["events"]] == [1]
    code, _, body = request(collector.http_url, "/ui/api/sessions?root=/etc", jar)
    assert code == 404


class Sse:
    """A raw SSE reader over a socket (urllib buffers; EventSource is the browser's)."""

    def __init__(self, url: str, path: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        lines = [f"GET {path} HTTP/1.1", f"Host: {parts.netloc}", "Accept: text/event-stream"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            data = self.sock.recv(65536)
            assert data, "the stream ended"
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def next_event(self) -> dict[str, str]:
        """The next event's fields (chunk sizes and comments skipped)."""
        while True:
            block = self._until(b"\n\n").decode()
            fields: dict[str, str] = {}
            for line in block.splitlines():
                name, sep, value = line.partition(": ")
                if sep and name in ("id", "event", "data", "retry"):
                    fields[name] = value
            if "data" in fields:
                return fields

    def close(self) -> None:
        self.sock.close()


def test_live_sse_resumes_with_last_event_id(collector: CollectorProcess, agent: Agent) -> None:
    """/live streams written events with EPOCH:SEQ ids; Last-Event-ID resumes after it; a gone epoch says lagged."""
    address = ui_address(collector)
    key = parse_qs(urlsplit(address).query)["key"][0]
    path = f"/live?key={key}&session=web-top&subtree=1"
    first = Sse(collector.http_url, path, {})
    try:
        hello = first.next_event()
        assert hello["event"] == "subscribed"
        agent.do("step look")
        got = [first.next_event(), first.next_event()]
        assert [json.loads(item["data"])["action"] for item in got] == ["look", "look"]
        last_id = got[0]["id"]
    finally:
        first.close()
    agent.do("fail build")
    resumed = Sse(collector.http_url, path, {"Last-Event-ID": last_id})
    try:
        resumed.next_event()  # subscribed
        again = [json.loads(resumed.next_event()["data"]) for _ in range(3)]
        assert [(e["action"], e["stage"]) for e in again] == [
            ("look", "FINISH"),
            ("build", "PENDING"),
            ("build", "FINISH"),
        ]
    finally:
        resumed.close()
    stale = Sse(collector.http_url, path, {"Last-Event-ID": "not-this-epoch:5"})
    try:
        stale.next_event()
        notice = stale.next_event()
        assert notice["event"] == "lagged" and json.loads(notice["data"])["epoch_changed"] is True
    finally:
        stale.close()
    ticks = Sse(collector.http_url, f"/live?key={key}&ticks=1", {})
    try:
        ticks.next_event()  # subscribed
        agent.do("burst 30")
        counted = 0
        while counted < 30:  # notices, not events: a few of them cover the burst
            notice = ticks.next_event()
            assert notice["event"] == "written"
            counted += json.loads(notice["data"])["count"]
        assert counted == 30
    finally:
        ticks.close()
    code, _, body = request(collector.http_url, path.replace("subtree=1", "since=" + last_id.split(":")[0] + ":999"))
    assert code == 400 and b"past the newest" in body
