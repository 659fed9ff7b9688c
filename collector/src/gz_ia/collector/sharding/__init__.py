"""A sharded collector: a front process and share processes that divide the sessions between them.

Only the daemon (and the CLI) import this package; the collector of one process never does.
"""
