"""The MCP tools (``gz-ia mcp``, the ``mcp`` extra): agents log and read sessions over stdio.

:mod:`.server` adapts :mod:`gz_ia.collector.reading`, :mod:`gz_ia.collector.views.timeline` and
:mod:`gz_ia.collector.oneshot.typed_event` to MCP tools. This ``__init__`` imports nothing, so the
package loads without the extra.
"""
