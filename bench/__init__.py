"""The gz-ia benchmark suite: our collector side by side with syslog-ng and rsyslog.

Run it with ``bench/run`` (see ``docs/performance.md``). It is not part of the unit tests: it installs
the peers itself, takes minutes, and writes its figures to ``bench/results/``.
"""
