"""A session's title: its first prompt, else its first real action with what it acted on."""

from __future__ import annotations

from gz_ia.collector.web.titles import TITLE_CHARS, title_of


def test_the_first_real_action_names_a_session() -> None:
    """The lifecycle cycles every session opens alike are passed over; the first call and its subject name it."""
    events: list[tuple[str, dict[str, object] | None]] = [
        ("session", {"model": "x"}),
        ("prompt", {"prompt_chars": 40}),
        ("Bash", {"command": "npm test"}),
        ("Read", {"file_path": "a.py"}),
    ]
    assert title_of(events) == ("Bash: npm test", True)


def test_a_prompt_wins_and_is_cut_to_one_line() -> None:
    """A stored prompt (wherever it comes) is the title, its whitespace folded and its length bounded."""
    assert title_of([("Bash", {"command": "ls"}), ("prompt", {"prompt": "fix\n  the   build"})]) == (
        "Bash: ls",
        True,
    )
    title, final = title_of([("prompt", {"prompt": "fix\n  the   build " * 40})])
    assert final and title is not None and title.startswith("fix the build fix") and len(title) == TITLE_CHARS


def test_a_session_with_only_lifecycle_cycles_is_named_by_them_until_more_comes() -> None:
    """Only lifecycle cycles so far: the first one names it, and the title may change later."""
    assert title_of([("session", None), ("prompt", None)]) == ("session", False)
    assert title_of([]) == (None, False)
    assert title_of([("deploy", {"tool": "deploy"})]) == ("deploy", True)  # a subject equal to the action
