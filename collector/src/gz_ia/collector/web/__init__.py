"""The web view: a page the collector serves on its loopback HTTP side, live through ``/live``.

Plain HTML, CSS and JavaScript shipped as package data (``static/``): nothing to build or install
beyond the collector. :mod:`.access` says who may read it, :mod:`.api` what it reads, :mod:`.sse`
how it stays live, :mod:`.routes` where.
"""

from __future__ import annotations

from .access import UiAccess as UiAccess
from .routes import WebView as WebView

__all__ = ["UiAccess", "WebView"]
