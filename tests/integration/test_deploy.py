"""What deploy/ ships, checked with the real tools and against a real collector's metrics.

- ``deploy/prometheus/gz-ia-rules.yml``: ``promtool check rules``, and its unit tests beside it with
  ``promtool test rules``;
- ``deploy/grafana/gz-ia.json``: every query parses as PromQL and names only metrics a real
  collector exposes;
- every ``gzia_*`` name in docs/, README.md and deploy/ is in a real collector's scrape, or is one
  of the few produced only under a stated condition.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.conftest import CollectorProcess

from gz_ia.client import EventRejected, build_event

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "gz-ia-rules.yml"
RULES_TESTS = REPO / "deploy" / "prometheus" / "gz-ia-rules.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "gz-ia.json"
METRIC = re.compile(r"\b(?:gzia_[a-z0-9_]+|process_[a-z_]+|python_[a-z_]+)")
SHARDED_ONLY = {"gzia_shares_answering"}
"""Exposed only by a sharded collector's front (``shards`` > 1): docs/operations.md says so."""
EXPORTER_PREFIX = "gzia_otel_"
"""Exposed by ``gz-ia export otel`` on its own endpoint, not by the collector."""


@pytest.fixture(name="promtool", scope="module")
def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: scripts/test installs it (Debian package `prometheus`)")
    return path


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables' queries."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*), \w+\)", variable["definition"])
            assert match is not None, variable
            queries.append(match.group(1))
    return queries


def _as_promql(query: str) -> str:
    """A Grafana query with its variables filled in as Grafana would."""
    return query.replace("$__rate_interval", "5m").replace("$instance", ".*")


def test_alert_rules_pass_promtool_check_rules(promtool: str) -> None:
    """The shipped alert rules lint clean."""
    result = _run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"SUCCESS: [1-9]\d* rules found", result.stdout), result.stdout


def test_alert_rules_unit_tests_pass(promtool: str) -> None:
    """``promtool test rules`` runs the unit tests beside the rules: each alert fires when it should
    and stays silent before, with the labels and annotations shipped."""
    result = _run(promtool, "test", "rules", RULES_TESTS.name, cwd=RULES_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    tested = set(re.findall(r"^\s+alertname: (\w+)$", RULES_TESTS.read_text(), re.MULTILINE))
    shipped = set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE))
    assert shipped
    assert tested == shipped, "every shipped alert has a unit test"


def test_dashboard_queries_parse_as_promql(promtool: str, short_tmp: Path) -> None:
    """Every dashboard query is valid PromQL: promtool parses each as a recording rule."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"gz_ia_dashboard_query_{i}", "expr": _as_promql(query)}
                    for i, query in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = short_tmp / "dashboard-queries.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    result = _run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def _scraped_names(exposition: str) -> set[str]:
    """Sample names (``_total``, ``_bucket``...) and family names of an exposition."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def _exporter_names() -> set[str]:
    from gz_ia.collector.otel.export import _Metrics

    registry = CollectorRegistry()
    _Metrics(registry)
    return _scraped_names(generate_latest(registry).decode())


def _named_in(path: Path) -> set[str]:
    return set(METRIC.findall(path.read_text()))


def test_every_metric_named_in_docs_and_deploy_exists(collector: CollectorProcess) -> None:
    """Each metric name in the dashboard, the alert rules, docs/ and README.md is in the scrape of a
    real collector that accepted and rejected events (or in the exporter's, for ``gzia_otel_*``;
    or is one of the sharded front's own, documented as such)."""
    client = collector.client()
    try:
        client.send(build_event(session_id="names-1", action="a", stage="READ", agent="t"), timeout=20)
        client.send(build_event(session_id="names-1", action="a", stage="FINISH", agent="t", duration_ms=3), timeout=20)
        with pytest.raises(EventRejected):
            client.send(build_event(session_id="names-2", action="x", stage="FINISH", agent="t"), timeout=20)
    finally:
        client.close()
    scraped = _scraped_names(collector.metrics())
    exporter = _exporter_names()
    assert "gzia_events_written_total" in scraped and "gzia_otel_backend_up" in exporter

    dashboard = {name for query in dashboard_queries() for name in METRIC.findall(query)}
    assert dashboard - scraped == set(), "the dashboard queries metrics the collector does not expose"
    assert _named_in(RULES) - scraped == set(), "the alert rules name metrics the collector does not expose"

    documents = [
        *sorted((REPO / "docs").glob("*.md")),
        REPO / "README.md",
        REPO / "deploy" / "prometheus" / "gz-ia-rules.test.yml",
    ]
    unknown: dict[str, list[str]] = {}
    for path in documents:
        for name in sorted(_named_in(path)):
            if name.endswith("_"):  # a prefix, as in `gzia_otel_*`
                known = any(other.startswith(name) for other in scraped | exporter)
            elif name.startswith(EXPORTER_PREFIX):
                known = name in exporter
            else:
                known = name in scraped or name in SHARDED_ONLY
            if not known:
                unknown.setdefault(name, []).append(path.name)
    assert unknown == {}, "named in the docs but exposed by no real scrape"


def test_sharded_only_metrics_are_documented_as_such() -> None:
    """The metrics a single-process collector lacks are said, where the docs name them, to be the front's."""
    operations = (REPO / "docs" / "operations.md").read_text()
    for name in SHARDED_ONLY:
        rows = [line for line in operations.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1 and "front" in rows[0] and "`shards` > 1" in rows[0], rows
