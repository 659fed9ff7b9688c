"""Session storage: the on-disk layout, the writer, and the rotation-safe reader.

``_layout`` and ``reader`` import only the standard library, msgspec and ``gz_ia.client``, so that
tools (the MCP server, scripts) can read sessions without the daemon's dependencies.
"""
