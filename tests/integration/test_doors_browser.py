"""A web page attacks the writing routes, in a real browser (Debian's Chromium driven by Playwright).

A page of another site (served here on ``localhost``, the collector being ``127.0.0.1``: another
site to the browser) and a page whose name resolves to 127.0.0.1 (``--host-resolver-rules``, as a
DNS rebinding leaves it) each try what any page can do without reading an answer: a form posted in
``text/plain`` into a hidden frame, ``navigator.sendBeacon`` and a ``no-cors`` fetch, to the hook
route and to OTLP, each carrying a well-formed Claude Code payload. Nothing is written; each
attempt is refused and counted by its reason.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import CollectorProcess, free_port, wait_for

CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 20_000
"""Safety bound on each wait; a passing run needs a fraction of it."""
ROUTES = ("/hooks/claude-code", "/v1/logs")

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)"
)


def _attack(target: str) -> str:
    """The attacker's page: three blind posts to each route of ``target`` (``http://host:port``)."""
    posts: list[str] = []
    for route in ROUTES:
        url = target + route
        payload = json.dumps({"session_id": f"csrf-{route.strip('/').replace('/', '-')}",
                              "hook_event_name": "UserPromptSubmit", "prompt": "planted", "cwd": "/tmp"})  # fmt: skip
        name, _, value = payload.rpartition(',"cwd":"')
        posts.append(f"""
<iframe name="sink{len(posts)}" style="display:none"></iframe>
<form method="POST" enctype="text/plain" target="sink{len(posts)}" action="{url}">
  <input name='{name},"cwd":"' value='{value}'>
</form>
<script>
  navigator.sendBeacon({json.dumps(url)}, {json.dumps(payload)});
  fetch({json.dumps(url)}, {{method: "POST", mode: "no-cors", body: {json.dumps(payload)}}}).catch(() => {{}});
</script>""")
    return f"""<!doctype html><html><body>{"".join(posts)}
<script>for (const form of document.forms) form.submit(); document.title = "sent";</script>
</body></html>"""


@pytest.fixture(name="attacker")
def _attacker(collector: CollectorProcess) -> Iterator[int]:
    """A server of the attacker's pages on 127.0.0.1 (any name that resolves there reaches it)."""
    port = free_port()

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host = self.headers.get("Host", "").rsplit(":", 1)[0]
            body = _attack(f"http://{'127.0.0.1' if host == 'localhost' else host}:{collector.http_port}").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    server.shutdown()
    server.server_close()


def _refused(collector: CollectorProcess, reason: str) -> float:
    return collector.metric(f'gzia_http_refused_total{{reason="{reason}"}}')


@pytest.mark.parametrize(
    ("page_host", "reason"),
    [("localhost", "cross_site"), ("rebound.example", "wrong_host")],
    ids=["another-site", "rebinding"],
)
def test_no_page_writes_through_the_writing_routes(
    collector: CollectorProcess, attacker: int, page_host: str, reason: str
) -> None:
    from playwright.sync_api import sync_playwright

    before = _refused(collector, reason)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--host-resolver-rules=MAP rebound.example 127.0.0.1"],
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"http://{page_host}:{attacker}/")
            page.wait_for_function("document.title === 'sent'")
            # Three blind posts per route; the browser sends them on its own time.
            wait_for(lambda: _refused(collector, reason) - before >= 3 * len(ROUTES), message=f"{reason} refusals")
        finally:
            browser.close()
    assert not [name for name in collector.all_sessions() if name.startswith("csrf-")]
    assert collector.metric('gzia_http_hook_payloads_total{outcome="staged"}') == 0
