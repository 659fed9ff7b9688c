"""Session storage: the on-disk layout and the writer (reading them back is :mod:`gz_ia.collector.reading`).

The layout modules (``names``, ``roots``, ``segments``, ``gzip_cache``, ``checkpoints``, ``tally``,
``replay``) import only the standard library, msgspec and ``gz_ia.client``, so that tools (the MCP
server, scripts) can read sessions without the daemon's dependencies.
"""
