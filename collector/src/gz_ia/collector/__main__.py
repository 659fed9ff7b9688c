"""``python -m gz_ia.collector`` runs the collector, like ``gz-ia-collector``."""

from .cli import collector_main

collector_main()
