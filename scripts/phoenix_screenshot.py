"""Take the screenshot of Phoenix in docs/images/phoenix-trace.png: one exported trace, opened in its UI.

Usage (a Phoenix with an exported session running, e.g. the one the backend tests start):
    uv run --no-sync python scripts/phoenix_screenshot.py http://127.0.0.1:6006 PROJECT TRACE_ID OUT.png

Playwright drives Debian's chromium (``/usr/bin/chromium``); it never downloads a browser.
"""

from __future__ import annotations

import json
import sys
import urllib.request


def project_id(base: str, name: str) -> str:
    """Phoenix's id of the project called ``name``."""
    with urllib.request.urlopen(f"{base}/v1/projects", timeout=30) as response:  # noqa: S310 (the URL is given)
        for project in json.loads(response.read())["data"]:
            if project["name"] == name:
                return str(project["id"])
    raise SystemExit(f"no project {name!r} in {base}")


def main() -> None:
    """Open the trace's page and save a screenshot of it."""
    base, project, trace, out = sys.argv[1:5]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        page.goto(f"{base}/projects/{project_id(base, project)}/traces/{trace}", timeout=120_000)
        # The span tree renders after its data arrives: wait for the root span's name, then settle.
        page.get_by_text(sys.argv[5] if len(sys.argv) > 5 else "invoke_agent").first.wait_for(timeout=120_000)
        page.wait_for_timeout(2000)
        page.screenshot(path=out)
        browser.close()


if __name__ == "__main__":
    main()
