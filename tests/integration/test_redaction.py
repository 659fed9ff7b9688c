"""Secrets never reach disk: the corpus of secret shapes sent through every path into a real collector
(the client, ``gz-ia session log``, the Claude Code command hook, its http hooks, the OTLP receiver,
the spools written while no collector runs, ``gz-ia export otel``), then every byte under the test's
directories searched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import spool_dir, wait_for
from tests.integration.test_claude_code import HOOK
from tests.integration.test_otel import Exporter, Receiver

from gz_ia.client.redaction import Redactor

CORPUS = json.loads((Path(__file__).parents[1] / "fixtures" / "secrets" / "corpus.json").read_text())
SECRETS: list[dict[str, str]] = CORPUS["secrets"]
OVERLAPPING: list[dict[str, Any]] = CORPUS["overlapping"]
ORDINARY: list[str] = CORPUS["ordinary"]
CLAUDE_SESSION = "bbad7d3b-4734-436d-be3e-20221d9f8019"


def _redacted(text: str) -> str:
    return Redactor().text(text)


def _forms(secret: str) -> list[bytes]:
    """The bytes a secret would show as in a file: as typed, JSON-escaped, or in its first line."""
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, secret.strip().split("\n", 1)[0]}
    return [form.encode() for form in forms if len(form) >= 8]


def _assert_no_secret_under(*directories: Path) -> int:
    """Search every file under ``directories`` for every secret; return how many files were read."""
    files = [path for directory in directories for path in directory.rglob("*") if path.is_file()]
    for path in files:
        data = path.read_bytes()
        for case in SECRETS:
            for form in _forms(case["secret"]):
                assert form not in data, f"{case['rule']} secret stored in {path}"
    return len(files)


def _log_corpus(client: Any, session_id: str) -> None:
    for index, case in enumerate(SECRETS):
        action = f"step {index}: {case['text']}"
        client.log(session_id=session_id, action=action, stage="READ", agent="claude", attrs={"cmd": case["text"]})
        client.log(session_id=session_id, action=action, stage="FINISH", status="FAILED", agent="claude",
                   error=f"failed: {case['text']}")  # fmt: skip


def _assert_corpus_intact(lines: list[dict[str, Any]]) -> None:
    """Each secret's cycle is there whole, one READ and one FINISH, its texts redacted and nothing else."""
    assert len(lines) == 2 * len(SECRETS)
    for index, case in enumerate(SECRETS):
        read, finish = lines[2 * index], lines[2 * index + 1]
        action = _redacted(f"step {index}: {case['text']}")
        assert (read["action"], read["stage"], read["attrs"]) == (action, "READ", {"cmd": _redacted(case["text"])})
        assert (finish["action"], finish["stage"], finish["status"]) == (action, "FINISH", "FAILED")
        assert finish["error"] == _redacted(f"failed: {case['text']}")
        assert f"[REDACTED:{case['rule']}]" in read["action"]


@pytest.mark.shards(1, 2)
def test_the_clients_events_are_stored_redacted_and_counted(collector: Any, schema_validator: Any) -> None:
    """Action, attrs and error of each secret's cycle are stored redacted; every line still validates;
    each redaction is counted by rule in the metrics and in ``gz-ia status``."""
    client = collector.client()
    _log_corpus(client, "redact-client")
    client.flush()
    client.close()
    lines = collector.session_lines("redact-client")
    _assert_corpus_intact(lines)
    for line in lines:
        schema_validator.validate(line)
    # Each text redacted three times (action twice, attrs once) plus the error: 4 per secret.
    expected: dict[str, int] = {}
    for case in SECRETS:
        expected[case["rule"]] = expected.get(case["rule"], 0) + 4
    for rule, count in expected.items():
        assert collector.metric(f'gzia_redactions_total{{pattern="{rule}"}}') == count
    status = collector.gz_ia("status", check=True).stdout
    assert f"  redacted github-token: {expected['github-token']}" in status.splitlines()
    assert _assert_no_secret_under(collector.base, spool_dir().parent) > 0


def test_overlapping_secrets_are_masked_whole_and_ordinary_text_stored_as_sent(collector: Any) -> None:
    """A Bash command in attrs, over the socket into a real collector and read back from the session
    file: where rules' matches overlap nothing is left in clear, and ordinary text is kept as sent."""
    client = collector.client()
    for index, case in enumerate(OVERLAPPING):
        client.log(session_id="redact-overlap", action=f"Bash {index}", stage="READ", agent="claude",
                   attrs={"command": case["text"]})  # fmt: skip
    for index, text in enumerate(ORDINARY):
        client.log(session_id="redact-ordinary", action=f"Bash {index}", stage="READ", agent="claude",
                   attrs={"command": text})  # fmt: skip
    client.flush()
    client.close()
    overlapping = collector.session_lines("redact-overlap")
    assert [line["attrs"]["command"] for line in overlapping] == [case["redacted"] for case in OVERLAPPING]
    assert [line["attrs"]["command"] for line in collector.session_lines("redact-ordinary")] == ORDINARY
    stored = b"".join(path.read_bytes() for path in collector.base.rglob("*") if path.is_file())
    for case in OVERLAPPING:
        for secret in case["secrets"]:
            assert secret.encode() not in stored


def test_session_log_and_the_claude_code_hook_store_nothing_secret(collector: Any, tmp_path: Path) -> None:
    """``gz-ia session log`` and the command hook fed real-shaped payloads (fields as the real Claude
    Code sends them, in shared/agents/hook-inputs) carrying the corpus in a Bash command and its error."""
    for index, case in enumerate(SECRETS[:8]):
        result = collector.gz_ia(
            "session", "log", "redact-oneshot", "--agent", "agy", "--stage", "FINISH" if index % 2 else "READ",
            "--action", f"one-shot {index // 2}", "--attr", f"note={case['text']}",
            *(("--status", "FAILED", "--error", case["text"]) if index % 2 else ()),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    cwd = collector.workspace / "src"
    cwd.mkdir(exist_ok=True)
    common = {"session_id": CLAUDE_SESSION, "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(cwd),
              "prompt_id": "85ffcd72-c1d4-4210-a20a-d452855f5fb0", "permission_mode": "bypassPermissions"}  # fmt: skip
    environment = dict(collector.env)
    environment.pop("GZ_IA_ROOT")
    for index, case in enumerate(SECRETS):
        call = {**common, "effort": {"level": "high"}, "tool_name": "Bash",
                "tool_input": {"command": case["text"], "description": "Call the API"},
                "tool_use_id": f"toolu_01Redact{index:04d}"}  # fmt: skip
        failure = {**call, "hook_event_name": "PostToolUseFailure", "is_interrupt": False, "duration_ms": 15,
                   "error": f"Exit code 22\ncurl: (22) 401 for {case['text']}"}  # fmt: skip
        for payload in ({**call, "hook_event_name": "PreToolUse"}, failure):
            result = subprocess.run(
                HOOK,
                input=json.dumps(payload),
                env=environment,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    lines = collector.session_lines(CLAUDE_SESSION)
    failed = [line for line in lines if line["status"] == "FAILED"]
    assert len(failed) == len(SECRETS)
    assert all(line["action"] == "Bash" and "[REDACTED:" in line["error"] for line in failed)
    assert "[REDACTED:" in "".join(str(line.get("attrs")) for line in lines)
    oneshot = collector.session_lines("redact-oneshot")
    assert [line["attrs"]["note"] for line in oneshot] == [_redacted(case["text"]) for case in SECRETS[:8]]
    _assert_no_secret_under(collector.base, spool_dir().parent)


AGENT = """
import json, sys
from gz_ia.client import Client
client = Client()  # what is not delivered by exit is spooled
for index, case in enumerate(json.loads(sys.argv[1])):
    action = f"step {index}: {case['text']}"
    client.log(session_id="redact-spooled", action=action, stage="READ", agent="claude", attrs={"cmd": case["text"]})
    client.log(session_id="redact-spooled", action=action, stage="FINISH", status="FAILED", agent="claude",
               error=f"failed: {case['text']}")
"""


def test_spools_written_while_no_collector_runs_hold_no_secret(make_collector: Any) -> None:
    """An agent, ``gz-ia session log`` and the hook spool while the collector is down: the spool files
    hold the marks, not the secrets; the collector that adopts them stores the same redacted events."""
    collector = make_collector(start=False)
    environment = {**collector.env, "GZ_IA_EXIT_TIMEOUT": "0.2"}
    subprocess.run([sys.executable, "-c", AGENT, json.dumps(SECRETS)], env=environment, check=True, timeout=60)
    result = collector.gz_ia(
        "session", "log", "redact-oneshot", "--agent", "agy", "--stage", "READ", "--action", SECRETS[3]["text"]
    )
    assert result.returncode == 75, result.stderr
    segments = list(spool_dir().glob("*.spool"))
    assert len(segments) >= 2, "the agent and the one-shot command spooled"
    spooled = b"".join(segment.read_bytes() for segment in segments)
    assert b"[REDACTED:github-token]" in spooled
    _assert_no_secret_under(spool_dir(), collector.base)
    collector.start()
    wait_for(lambda: len(collector.session_lines("redact-spooled")) == 2 * len(SECRETS), message="adoption")
    _assert_corpus_intact(collector.session_lines("redact-spooled"))
    assert collector.session_lines("redact-oneshot")[0]["action"] == _redacted(SECRETS[3]["text"])
    # Marks a client's spool made are counted at ingest, under their rule.
    assert collector.metric('gzia_redactions_total{pattern="github-token"}') > 0
    _assert_no_secret_under(spool_dir().parent, collector.base)


def test_the_otel_export_carries_no_secret(collector: Any, short_tmp: Path) -> None:
    """What ``gz-ia export otel`` sends of the sessions (log records and spans) holds only the marks."""
    from tests.conftest import free_port

    client = collector.client()
    _log_corpus(client, "redact-export")
    client.flush()
    client.close()
    receiver = Receiver(free_port())
    receiver.start()
    exporter = Exporter(collector, receiver, short_tmp / "otel-state")
    try:
        exporter.start()
        wait_for(lambda: len(receiver.records) >= 2 * len(SECRETS), message="every record exported")
        exporter.stop()
    finally:
        exporter.close()
        receiver.stop()
    sent = json.dumps([receiver.records, receiver.spans], default=str).encode()
    assert b"[REDACTED:" in sent
    for case in SECRETS:
        for form in _forms(case["secret"]):
            assert form not in sent, f"{case['rule']} secret exported"
    _assert_no_secret_under(collector.base, short_tmp)


def test_the_http_hooks_and_the_otlp_receiver_store_nothing_secret(collector: Any, tmp_path: Path) -> None:
    """The receivers on the HTTP side redact as the socket does: the corpus in a Bash command and its
    error posted to ``/hooks/claude-code``, and in the status message of failed OTLP tool spans."""
    from tests.integration.test_claude_code_http import _post as post_hook
    from tests.integration.test_otlp import _post as post_otlp
    from tests.integration.test_otlp import _tool_span_body

    session = "5d0c2b4e-6a1f-4e3b-9c8d-7f6e5d4c3b2a"
    common = {"session_id": session, "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(collector.workspace),
              "permission_mode": "bypassPermissions", "tool_name": "Bash"}  # fmt: skip
    for index, case in enumerate(SECRETS):
        call = {**common, "tool_input": {"command": case["text"]}, "tool_use_id": f"toolu_01Http{index:04d}"}
        failure = {**call, "hook_event_name": "PostToolUseFailure", "error": f"401 for {case['text']}"}
        for payload in ({**call, "hook_event_name": "PreToolUse"}, failure):
            assert post_hook(f"{collector.http_url}/hooks/claude-code", payload, collector.http_headers()) == (
                200,
                b"{}",
            )
    trace = "7" * 32
    for index, case in enumerate(SECRETS):
        span = json.loads(_tool_span_body(trace, f"{index + 1:016x}", "f" * 16, tool="Bash"))
        span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["status"] = {"code": 2, "message": case["text"]}
        body = json.dumps(span).encode()
        assert (
            post_otlp(collector.http_url + "/v1/traces", body, "application/json", **collector.http_headers())[0] == 200
        )
    hooked = [line for line in collector.session_lines(session) if line["status"] == "FAILED"]
    assert len(hooked) == len(SECRETS)
    assert all("[REDACTED:" in line["error"] for line in hooked)
    received = [line for lines in collector.all_sessions().values() for line in lines if line.get("cycle")]
    spanned = [line for line in received if line["status"] == "FAILED" and line["session_id"] != session]
    assert sorted(line["error"] for line in spanned) == sorted(_redacted(case["text"]) for case in SECRETS)
    _assert_no_secret_under(collector.base, spool_dir().parent)
