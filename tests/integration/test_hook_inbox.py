"""The hook inbox: the shell hook ``gz-ia install claude-code`` writes, and the collector that takes it.

The real Claude Code runs it in tests/integration/test_claude_code_http.py (the same events as the
command and http hooks; every payload kept while no collector runs). Here the script is run as
Claude Code runs a command hook (``sh -c`` with the payload on stdin), with a hook input captured
from a real run, for what no agent run can provoke: a crash between logging a drop and removing
it, a damaged drop, an inbox that is not the user's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import CollectorProcess, spool_dir, wait_for
from tests.fixtures.claude_run import GZ_IA

CAPTURED = Path(__file__).parent.parent / "fixtures" / "claude_code" / "captured"


def _install(collector: CollectorProcess, home: Path) -> str:
    """``gz-ia install claude-code --hooks inbox`` into ``home``; the command it wrote."""
    env = {**collector.env, "HOME": str(home)}
    done = subprocess.run([*GZ_IA, "install", "claude-code", "--user", "--hooks", "inbox"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.startswith("hooks: --hooks inbox"), done.stdout
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    return str(settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"])


def _hook(collector: CollectorProcess, command: str, session: str, **env: str) -> None:
    payload: dict[str, Any] = json.loads((CAPTURED / "B-UserPromptSubmit.json").read_text())
    payload.update(session_id=session, cwd=str(collector.workspace))
    ran = subprocess.run(["sh", "-c", command], input=json.dumps(payload), env={**collector.env, **env},
                         capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


def test_a_drop_taken_again_after_a_crash_is_not_logged_twice(collector: CollectorProcess, tmp_path: Path) -> None:
    command = _install(collector, tmp_path / "home")
    collector.stop()
    _hook(collector, command, "inbox-crash")
    (drop,) = (spool_dir() / "hooks").glob("*.drop")
    kept = tmp_path / "kept.drop"
    shutil.copy2(drop, kept)  # the drop as a crash after its events were written would leave it
    collector.start()
    wait_for(lambda: collector.session_lines("inbox-crash"), message="the drop to be logged")
    wait_for(lambda: not drop.exists(), message="the drop to be removed")
    written = collector.session_lines("inbox-crash")
    collector.stop()
    shutil.copy2(kept, drop)
    collector.start()
    wait_for(lambda: not drop.exists(), message="the drop taken again")
    assert collector.session_lines("inbox-crash") == written
    assert [line["action"] for line in written] == ["prompt"]


def test_a_damaged_drop_is_quarantined_and_shown_by_status(collector: CollectorProcess) -> None:
    inbox = spool_dir() / "hooks"
    wait_for(inbox.exists, message="the collector to make its inbox")
    (inbox / "1-0.drop").write_bytes(b"this is no gz-ia hook drop at all\n")  # by hand: no hook writes such a file
    wait_for(lambda: collector.metric('gzia_hook_drops_total{outcome="quarantined"}') == 1, message="quarantine")
    listed = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["spools"]["quarantined"]
    assert [Path(each["path"]).name for each in listed] == ["hook-1-0.drop"]
    assert listed[0]["reason"] == "not a gz-ia hook drop"


def test_an_inbox_that_is_not_the_users_own_directory_is_never_written(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """A link in the inbox's place (to a directory someone else could read) is passed by: the hook runs
    ``gz-ia hook claude-code`` instead, which logs through the socket. So does GZ_IA_DISABLED, which
    that command honours."""
    command = _install(collector, tmp_path / "home")
    inbox = spool_dir() / "hooks"
    wait_for(inbox.exists, message="the collector to make its inbox")
    collector.stop()
    inbox.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    inbox.symlink_to(elsewhere)
    collector.start(wait=True)
    _hook(collector, command, "inbox-linked")
    assert not os.listdir(elsewhere)
    assert [line["action"] for line in collector.session_lines("inbox-linked")] == ["prompt"]
    _hook(collector, command, "inbox-disabled", GZ_IA_DISABLED="1")
    assert not collector.session_file("inbox-disabled").exists()
