"""Secrets kept off disk: the shapes of common credentials, and the pure function that masks them.

Tool inputs carry commands, headers and environment, so an API key typed into a ``curl`` command
would otherwise be stored as typed. The collector applies a :class:`Redactor` once at ingest to
every event it stores, whichever way the event came; the client applies one too before it spools
an event to disk (a spooled secret is on disk as well), which is why this module lives in the thin
client. docs/user-guide.md lists what the defaults cover.

A match is replaced by a mark naming its rule, ``[REDACTED:github-token]``. Where a rule names a
part (a ``value`` group), only that part is replaced, so ``password=hunter2`` becomes
``password=[REDACTED:credential-pair]`` and ``ghp_…`` keeps its ``ghp_``: what kind of secret was
there stays readable, the secret does not. Every rule is searched on its own over the text as it
came and the union of what they found is masked, so that one rule's match never hides another's
(``curl -u AKIA…:x``: the user-password rule takes the key id for a user name, the key id is masked
all the same); overlapping matches become one mark. Redacting a redacted text changes nothing.

Speed: most texts hold no secret, and most events no attrs and an action already seen. Every default
rule starts at a literal, its anchor (``--``, ``_``, ``:``, ``AccountKey=``, ``mysql``, …); rules
are grouped by their anchor's first character, and a text is searched once per group that it holds
the literal of (what all the group's anchors begin with: ``k-``, ``glpat-``, ``:``), each expression
skipping in C to that character and failing fast on the rest of the anchor. Only a text a group
finds something in is searched rule by rule, and only with that group's rules. A text found clean is
remembered (a bounded set), since the same action name comes with each event of its cycle;
:meth:`Redactor.events` takes a whole batch, so that the usual event (no attrs, no error, the agent
and role of the last clean one, a known action) costs no call. Rules of the user's own
(``GZ_IA_REDACTION_PATTERNS``, the collector's ``[redaction]``) have no anchor: with any, every text
is searched with them too.
"""

from __future__ import annotations

import os
import re

from .env import GZ_IA_REDACTION_DISABLE, GZ_IA_REDACTION_ENABLED, GZ_IA_REDACTION_PATTERNS
from .limits import MAX_ACTION_LENGTH, MAX_AGENT_LENGTH, MAX_ERROR_LENGTH

# Not typing.TYPE_CHECKING, and msgspec and the schema only where a text changed: a one-shot
# command that spools redacts too, and those imports would cost it more than the rest of its call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, Final

    from .schema import LogEvent

__all__ = [
    "DEFAULT_RULES",
    "Redactor",
    "Rule",
    "checked_rule",
    "default_patterns",
    "parse_rules",
    "spool_redactor",
]


_NAME: Final = re.compile(r"[a-z][a-z0-9-]{0,39}\Z")
_MARK: Final = "[REDACTED:"
_NOT_MARKED: Final = r"(?!\[REDACTED:)"
_CLEAN_KEPT: Final = 65_536
_NOTHING_YET: Final = object()


class Rule:
    """One shape of secret: a name (the mark and the metric label) and a regular expression.

    A group named ``value`` in the expression is the part replaced; without one, the whole match is.
    """

    __slots__ = ("name", "pattern")

    def __init__(self, name: str, pattern: str) -> None:
        self.name = name
        self.pattern = pattern

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and (self.name, self.pattern) == (other.name, other.pattern)

    def __hash__(self) -> int:
        return hash((self.name, self.pattern))

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.pattern!r})"


class _Anchored:
    """A default rule as the combined expression holds it: the character every match starts at."""

    __slots__ = ("anchor", "rule")

    def __init__(self, rule: Rule, anchor: str) -> None:
        self.rule = rule
        self.anchor = anchor


# Key names whose value is a secret, as the text before ``=`` or ``:`` ends, any case.
_KEY_WORDS: Final = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "access_key",
    "access-key",
    "private_key",
    "private-key",
    "secret_key",
    "auth_key",
)


def _any_case(word: str) -> str:
    return f"(?i:{re.escape(word)})"


_LAST_LETTERS: Final = "".join(sorted({char for word in _KEY_WORDS for char in (word[-1].lower(), word[-1].upper())}))


def _key_before(anchor: str) -> str:
    """Lookbehinds (seen from after ``anchor``): a key word, with or without one quote or space
    between it and the anchor."""
    by_width: dict[int, list[str]] = {}
    for word in _KEY_WORDS:
        by_width.setdefault(len(word), []).append(re.escape(word))
    # One lookbehind per width (a lookbehind must have one): a dozen instead of one per word.
    looks = [
        f"(?<=(?i:{'|'.join(words)}){tail}{re.escape(anchor)})"
        for words in by_width.values()
        for tail in ("", "[\"' ]")
    ]
    return f"(?<=[{_LAST_LETTERS}\"' ]{re.escape(anchor)})(?:" + "|".join(looks) + ")"


_TOKEN_CHARS: Final = r"(?P<value>[A-Za-z0-9._~+/\-]{8,}=*)"  # noqa: S105 - a pattern, not a password
_VALUE: Final = _NOT_MARKED + r"(?P<value>[^\s\"'&;,)}\]>]{1,512})"
_AWS_SECRET: Final = r"['\"]?(?:[ \t]*[=:][ \t]*|[ \t]+)['\"]?(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"  # noqa: S105 - a pattern, not a password
"""After an AWS secret key's name: ``=``, ``:`` or blanks, quotes, then the 40 characters of the key."""
_COOKIE_PAIRS: Final = (
    r"(?P<value>[^\s\"';=\[]{1,256}=[^\s\"';]{0,4096}(?:;[ \t]*[^\s\"';=]{1,256}=[^\s\"';]{0,4096}){0,64})"
)
"""A cookie header's or ``curl -b``'s ``name=value; name=value``: a name and ``=`` are required, so
a cookie jar's file name (``-b cookies.txt``) and prose (``cookie: it expires``) stay."""
_USER_PASSWORD: Final = r"[^\s:'\"]{1,128}:" + _VALUE
"""``curl -u``'s ``user:password``: the password is the part masked."""
_P_FLAG: Final = r"\b[^\n|;&]{0,256}?[ \t]-p['\"]?(?P<value>[^\s'\"]{1,512})"
"""A MySQL client's ``-pPASSWORD`` (glued to ``-p``: ``-p`` alone, or ``-p db``, prompts for one)."""
_ANCHORED: Final = (
    _Anchored(
        Rule(
            "private-key",
            r"[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----" + _NOT_MARKED + r"(?P<value>[\s\S]+?)(?=-----END|\Z)",
        ),
        "-----BEGIN",
    ),
    _Anchored(Rule("anthropic-key", r"(?<=\bsk-)ant-(?P<value>[A-Za-z0-9_\-]{16,})"), "k-"),
    _Anchored(
        Rule("openai-key", r"(?<=\bsk-)(?!ant-)(?P<value>(?=[A-Za-z0-9_\-]{0,200}[0-9])[A-Za-z0-9_\-]{20,})"), "k-"
    ),
    _Anchored(Rule("slack-token", r"(?<=\bxox)[abeoprs]-(?P<value>[A-Za-z0-9\-]{10,})"), "xox"),
    _Anchored(Rule("gitlab-token", r"(?<=\bglpat-)(?P<value>[A-Za-z0-9_\-]{20,})"), "glpat-"),
    _Anchored(
        Rule("pypi-token", r"(?<=\bpypi-AgEIcHlwaS5vcmc)(?P<value>[A-Za-z0-9_\-]{50,1000})"), "pypi-AgEIcHlwaS5vcmc"
    ),
    _Anchored(Rule("aws-secret-key", r"(?<=secret-access-key)" + _AWS_SECRET), "-access-key"),
    _Anchored(
        Rule(
            "credential-pair",
            r"(?<!\S--)(?:" + "|".join(_any_case(word) for word in _KEY_WORDS) + r")[ =]['\"]?" + _VALUE,
        ),
        "--",
    ),
    _Anchored(Rule("user-password", r"(?<!\S--)user[ =]['\"]?" + _USER_PASSWORD), "--"),
    _Anchored(Rule("user-password", r"(?<!\S-u)[ =]['\"]?" + _USER_PASSWORD), "-u"),
    _Anchored(Rule("cookie", r"(?<!\S--)cookie[ =]['\"]?" + _COOKIE_PAIRS), "--"),
    _Anchored(Rule("cookie", r"(?<!\S-b)[ =]['\"]?" + _COOKIE_PAIRS), "-b"),
    _Anchored(Rule("github-token", r"(?<=\bgh[pousr]_)(?P<value>[A-Za-z0-9]{20,})"), "_"),
    _Anchored(Rule("github-token", r"(?<=\bgithub_pat_)(?P<value>[A-Za-z0-9_]{20,})"), "_"),
    _Anchored(Rule("stripe-key", r"(?<=\b[rs]k_live_)(?P<value>[A-Za-z0-9]{16,})"), "_"),
    _Anchored(Rule("npm-token", r"(?<=\bnpm_)(?P<value>[A-Za-z0-9]{36})\b"), "_"),
    _Anchored(Rule("huggingface-token", r"(?<=\bhf_)(?P<value>[A-Za-z0-9]{34,})\b"), "_"),
    _Anchored(Rule("aws-secret-key", r"(?<=secret_access_key)" + _AWS_SECRET), "_access_key"),
    _Anchored(Rule("aws-secret-key", r"(?<=SECRET_ACCESS_KEY)" + _AWS_SECRET), "_ACCESS_KEY"),
    _Anchored(Rule("aws-access-key", r"(?<=\bA)[KS]IA(?P<value>[A-Z0-9]{16})\b"), "A"),
    _Anchored(Rule("google-api-key", r"(?<=\bA)Iza(?P<value>[0-9A-Za-z_\-]{35})"), "A"),
    _Anchored(Rule("jwt", r"(?<=\beyJ)[A-Za-z0-9_\-]{8,}\.eyJ(?P<value>[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"), "J"),
    _Anchored(
        Rule("sendgrid-key", r"(?<=\bSG\.)(?P<value>[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})(?![A-Za-z0-9_\-])"), "SG."
    ),
    _Anchored(
        Rule(
            "slack-webhook",
            r"(?<=\bhooks\.slack\.com/)(?:services|workflows|triggers)/(?P<value>[A-Za-z0-9+/_\-]{20,})",
        ),
        ".slack.com/",
    ),
    _Anchored(
        Rule(
            "discord-webhook",
            r"(?:(?<=\bdiscord\.com/api)|(?<=\bdiscordapp\.com/api))(?:/v[0-9]{1,2})?/webhooks/[0-9]{5,30}/"
            r"(?P<value>[A-Za-z0-9_\-]{30,})",
        ),
        ".com/api",
    ),
    _Anchored(
        Rule("url-credentials", r"(?<=[A-Za-z0-9]://)[^\s:/@]{1,128}:" + _NOT_MARKED + r"(?P<value>[^\s/@]{1,256})@"),
        "://",
    ),
    _Anchored(
        Rule(
            "authorization",
            r"(?:(?<=[Aa]uthorization:)|(?<=AUTHORIZATION:)|(?<=[Aa]uthorization[\"']:)|(?<=AUTHORIZATION[\"']:))"
            r"[ \t]*[\"']?(?:(?:[Bb]earer|BEARER|[Bb]asic|BASIC|[Tt]oken|TOKEN|[Dd]igest)[ \t]+)?+"
            + _NOT_MARKED
            + r"(?P<value>[^\s\"']{1,2048})",
        ),
        ":",
    ),
    _Anchored(
        Rule(
            "cookie",
            r"(?:(?<=[Cc]ookie:)|(?<=COOKIE:)|(?<=[Cc]ookie[\"']:)|(?<=COOKIE[\"']:))[ \t]*[\"']?" + _COOKIE_PAIRS,
        ),
        ":",
    ),
    _Anchored(Rule("telegram-bot-token", r"(?<=[0-9]{5}:)(?P<value>[A-Za-z0-9_\-]{35})(?![A-Za-z0-9_\-])"), ":"),
    _Anchored(Rule("credential-pair", _key_before(":") + r"[ \t]*[\"']?" + _VALUE), ":"),
    _Anchored(Rule("azure-key", r"(?P<value>[A-Za-z0-9+/]{20,}={0,2})"), "AccountKey="),
    _Anchored(Rule("azure-key", r"(?P<value>[A-Za-z0-9+/]{20,}={0,2})"), "SharedAccessKey="),
    _Anchored(Rule("credential-pair", _key_before("=") + r"[ \t]*[\"']?" + _VALUE), "="),
    _Anchored(Rule("bearer-token", r"[ \t]+" + _NOT_MARKED + _TOKEN_CHARS), "Bearer"),
    _Anchored(Rule("bearer-token", r"(?<=\bbearer)[ \t]+" + _NOT_MARKED + _TOKEN_CHARS), "bearer"),
    _Anchored(Rule("bearer-token", r"[ \t]+" + _NOT_MARKED + _TOKEN_CHARS), "BEARER"),
    _Anchored(Rule("password-argument", r"(?<![\w.-]mysql)(?:dump|admin|sh)?" + _P_FLAG), "mysql"),
    _Anchored(Rule("password-argument", r"(?<![\w.-]mariadb)(?:-dump|-admin)?" + _P_FLAG), "mariadb"),
    _Anchored(
        Rule("password-argument", r"(?<=sshpass -p)(?<![\w.-]sshpass -p)[ \t]*['\"]?(?P<value>[^\s'\"]{1,512})"), "-p"
    ),
)
"""The default rules, each with its anchor: a literal every match starts with; the pattern is what
follows it. Overlapping matches are marked with the first rule's name in this order."""

DEFAULT_RULES: Final = tuple(dict.fromkeys(anchored.rule.name for anchored in _ANCHORED))
"""The names of the default rules (where matches overlap, the mark names the first in this order)."""


def default_patterns() -> tuple[Rule, ...]:
    """Each default rule's expression as it is searched alone (a name may have several)."""
    return tuple(Rule(anchored.rule.name, re.escape(anchored.anchor) + anchored.rule.pattern) for anchored in _ANCHORED)


_MARKS: Final = re.compile(r"\[REDACTED:[a-z][a-z0-9-]{0,39}\]")


class _Searched:
    """One rule as the redactor searches it alone; ``index`` orders the rules (whose mark wins)."""

    __slots__ = ("anchor", "has_value", "index", "name", "pattern")

    def __init__(self, index: int, name: str, pattern: re.Pattern[str], anchor: str = "") -> None:
        self.index = index
        self.anchor = anchor
        self.name = name
        self.pattern = pattern
        self.has_value = "value" in pattern.groupindex


def _outside(spans: list[tuple[int, int, int, str]], marks: list[tuple[int, int]]) -> list[tuple[int, int, int, str]]:
    """``spans`` less the marks already in the text: a mark is kept as it is, never masked again."""
    kept = []
    for start, index, end, name in spans:
        for mark_start, mark_end in marks:
            if mark_end <= start or mark_start >= end:
                continue
            if start < mark_start:
                kept.append((start, index, mark_start, name))
            start = max(start, mark_end)
            if start >= end:
                break
        if start < end:
            kept.append((start, index, end, name))
    return kept


def parse_rules(text: str) -> list[Rule]:
    """Rules from ``GZ_IA_REDACTION_PATTERNS``'s form: one ``name=regex`` per line, blank lines skipped.

    Raises:
        ValueError: a line without a valid name, or an expression that does not compile or
            matches the empty text.
    """
    rules = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, pattern = line.partition("=")
        rules.append(checked_rule(name.strip(), pattern if separator else ""))
    return rules


def checked_rule(name: str, pattern: str) -> Rule:
    """``Rule(name, pattern)`` once both are usable.

    Raises:
        ValueError: the name is not 1-40 of lowercase letters, digits and ``-`` (starting with a
            letter), or the expression does not compile, or it matches the empty text.
    """
    if not _NAME.match(name):
        raise ValueError(f"redaction rule name {name!r} must be 1-40 of a-z, 0-9 and '-', starting with a letter")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"redaction rule {name!r}: {pattern!r} is not a regular expression ({exc})") from exc
    if compiled.search("") is not None:
        raise ValueError(f"redaction rule {name!r}: {pattern!r} matches the empty text")
    return Rule(name, pattern)


class Redactor:
    """The default rules (less those disabled) and the user's own, compiled once.

    Args:
        extra: the user's rules, searched like the defaults (their marks lose ties to a default's).
        disable: names of default rules to leave out.
        on_redacted: called with a rule's name for each match replaced, and for each mark found
            already in a text (redacted before, by a client's spool): how the collector counts.

    Raises:
        ValueError: ``disable`` names no default rule.
    """

    def __init__(
        self,
        extra: Iterable[Rule] = (),
        *,
        disable: Iterable[str] = (),
        on_redacted: Callable[[str], None] | None = None,
    ) -> None:
        left_out = set(disable)
        unknown = left_out - set(DEFAULT_RULES)
        if unknown:
            known = ", ".join(DEFAULT_RULES)
            raise ValueError(f"no default redaction rule named {', '.join(sorted(unknown))} (known: {known})")
        self.on_redacted = on_redacted
        extra = list(extra)
        self.known = frozenset(DEFAULT_RULES) | {rule.name for rule in extra}
        """Rule names a mark found in a text is counted under (any other mark counts as ``other``)."""
        kept = [anchored for anchored in _ANCHORED if anchored.rule.name not in left_out]
        searched = [
            _Searched(
                index,
                anchored.rule.name,
                re.compile(re.escape(anchored.anchor) + anchored.rule.pattern),
                anchored.anchor,
            )
            for index, anchored in enumerate(kept)
        ]
        # Grouped by the first character of their anchor: one search per group, and only in a text
        # that holds the literal all the group's anchors begin with ("k-", "glpat-", or a single
        # character). Each expression starts with that character, which the search skips to in C,
        # and each branch with the rest of its anchor, which fails fast; one expression of every
        # rule would instead try every branch at each of many characters.
        by_first: dict[str, dict[str, list[int]]] = {}
        for index, anchored in enumerate(kept):
            by_first.setdefault(anchored.anchor[0], {}).setdefault(anchored.anchor[1:], []).append(index)
        self._groups = [
            (
                os.path.commonprefix([first + rest for rest in rests]),  # noqa: RUF071 (of strings, not paths)
                re.compile(
                    re.escape(first)
                    + "(?:"
                    + "|".join(
                        re.escape(rest)
                        + "(?:"
                        + "|".join(kept[index].rule.pattern.replace("(?P<value>", "(?:") for index in indexes)
                        + ")"
                        for rest, indexes in rests.items()
                    )
                    + ")"
                ),
                [searched[index] for indexes in rests.values() for index in indexes],
            )
            for first, rests in by_first.items()
        ]
        self._extra = [
            _Searched(len(kept) + index, rule.name, re.compile(rule.pattern)) for index, rule in enumerate(extra)
        ]
        self._clean: set[str] = set()
        self._clean_agent: object = _NOTHING_YET
        self._clean_role: object = _NOTHING_YET

    def text(self, value: str) -> str:
        """Return ``value`` with every secret replaced by its mark (``value`` itself when clean)."""
        if value in self._clean:
            return value
        # A loop, not a comprehension: most texts are new and clean, and this runs for each of them.
        found: list[_Searched] | None = None
        for prefix, pattern, rules in self._groups:
            if prefix in value and pattern.search(value) is not None:
                if found is None:
                    found = list(rules)
                else:
                    found += rules
        if found is not None or self._extra or _MARK in value:
            return self._masked(value, (found or []) + self._extra)
        self._remember_clean(value)
        return value

    def _remember_clean(self, value: str) -> None:
        clean = self._clean
        if len(clean) >= _CLEAN_KEPT:
            clean.clear()
        clean.add(value)

    def _masked(self, value: str, rules: list[_Searched]) -> str:
        """Every rule's matches over ``value`` as it came (``rules``: those that may match), their
        union masked.

        Rules are searched one by one, each over the original text, so that one rule's match
        cannot hide another's (a key id taken for ``curl -u``'s user name is still a key id);
        overlapping matches become one mark, named by the rule whose match starts first.
        """
        spans: list[tuple[int, int, int, str]] = []
        for rule in rules:
            if rule.anchor not in value:
                continue
            for match in rule.pattern.finditer(value):
                start, end = match.span("value") if rule.has_value and match.start("value") >= 0 else match.span()
                if start < end:
                    spans.append((start, rule.index, end, rule.name))
        marks = [match.span() for match in _MARKS.finditer(value)] if _MARK in value else []
        for start, end in marks:
            name = value[start + len(_MARK) : end - 1]
            self._count(name if name in self.known else "other")
        if marks and spans:
            spans = _outside(spans, marks)
        if not spans:
            if not marks:
                self._remember_clean(value)
            return value
        spans.sort()
        pieces: list[str] = []
        done = 0
        merged_start, _, merged_end, merged_name = spans[0]
        for start, _, end, name in spans[1:]:
            if start < merged_end:
                merged_end = max(merged_end, end)
                continue
            pieces += (value[done:merged_start], _MARK, merged_name, "]")
            self._count(merged_name)
            done = merged_end
            merged_start, merged_end, merged_name = start, end, name
        pieces += (value[done:merged_start], _MARK, merged_name, "]", value[merged_end:])
        self._count(merged_name)
        return "".join(pieces)

    def _count(self, name: str) -> None:
        if self.on_redacted is not None:
            self.on_redacted(name)

    def value(self, value: Any) -> Any:
        """Redact the strings in ``value``, recursively through lists and maps (keys too)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {self.value(key): self.value(item) for key, item in value.items()}
        return value

    def events(self, events: list[LogEvent | None]) -> list[LogEvent | None]:
        """:meth:`event` for each of a batch's events (None, an event that did not decode, stays).

        One call per batch rather than per event: most events take the clean path of
        :meth:`event`, which costs less than the call would. A batch with nothing to mask is
        returned as it is, not copied.
        """
        clean = self._clean
        redacted: list[LogEvent | None] | None = None  # copied only when an event changes
        agent, role = self._clean_agent, self._clean_role
        for index, event in enumerate(events):
            if event is None or (
                event.attrs is None
                and event.error is None
                and event.agent == agent
                and event.role == role
                and event.action in clean
            ):
                continue
            done = self.event(event)
            agent, role = self._clean_agent, self._clean_role
            if done is not event:
                if redacted is None:
                    redacted = list(events)
                redacted[index] = done
        return events if redacted is None else redacted

    def event(self, event: LogEvent) -> LogEvent:
        """Return ``event`` with its free text redacted and cut to its limits (itself when clean).

        Free text is ``action``, ``agent``, ``role``, ``error`` and ``attrs`` (keys and string
        values). Ids, stages and the time are left alone: they are checked shapes, not free text.
        """
        # Most events: no attrs, no error, the agent and role of the last clean event, an action
        # already found clean. Comparing agent and role costs less than hashing them again.
        if (
            event.attrs is None
            and event.error is None
            and event.agent == self._clean_agent
            and event.role == self._clean_role
            and event.action in self._clean
        ):
            return event
        role = event.role
        text = self.text
        action, agent = text(event.action), text(event.agent)
        role = None if role is None else text(role)
        error = None if event.error is None else text(event.error)
        attrs = event.attrs
        if attrs is not None:
            redacted = {text(key): text(value) if isinstance(value, str) else value for key, value in attrs.items()}
            if redacted != attrs:
                from .schema import fit_attrs

                attrs = fit_attrs(redacted)
        if (action, agent, role, error) == (event.action, event.agent, event.role, event.error) and (
            attrs is event.attrs
        ):
            clean = self._clean
            if agent in clean and (role is None or role in clean):
                self._clean_agent, self._clean_role = agent, role
            return event
        import msgspec

        from .schema import cut_text

        return msgspec.structs.replace(
            event,
            action=cut_text(action, MAX_ACTION_LENGTH),
            agent=cut_text(agent, MAX_AGENT_LENGTH),
            role=None if role is None else cut_text(role, MAX_AGENT_LENGTH),
            error=None if error is None else cut_text(error, MAX_ERROR_LENGTH),
            attrs=attrs,
        )

    def fields(self, fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """An event's map of fields (as an encoded event decodes untyped) with its free text
        redacted and cut to its limits as in :meth:`event`; None when nothing changed."""
        changed: dict[str, Any] | None = None
        for name, limit in _FREE_TEXT.items():
            value = fields.get(name)
            if value is None:
                continue
            redacted = self.value(value)
            if redacted != value:
                from .schema import cut_text, fit_attrs

                if changed is None:
                    changed = dict(fields)
                if isinstance(redacted, str):
                    redacted = cut_text(redacted, limit)
                elif isinstance(redacted, dict):
                    redacted = fit_attrs(redacted)
                changed[name] = redacted
        return changed


_FREE_TEXT: Final = {
    "action": MAX_ACTION_LENGTH,
    "agent": MAX_AGENT_LENGTH,
    "role": MAX_AGENT_LENGTH,
    "error": MAX_ERROR_LENGTH,
    "attrs": 0,
}
"""The free-text fields of an event, with their limits (attrs: :func:`fit_attrs`)."""


_spool_redactors: dict[tuple[str, str, str], Redactor | None] = {}


def spool_redactor(environ: Mapping[str, str] | None = None) -> Redactor | None:
    """The redactor a client applies before it spools: the defaults, with the rules of
    ``GZ_IA_REDACTION_PATTERNS`` and less those of ``GZ_IA_REDACTION_DISABLE`` (read now); None
    when ``GZ_IA_REDACTION_ENABLED`` is ``false``.

    Rules that do not parse are left out rather than refused: the caller is about to spool and must
    not fail (the collector refuses the same settings at its start, loudly).
    """
    environ = os.environ if environ is None else environ
    key = (
        environ.get(GZ_IA_REDACTION_ENABLED, ""),
        environ.get(GZ_IA_REDACTION_PATTERNS, ""),
        environ.get(GZ_IA_REDACTION_DISABLE, ""),
    )
    if key not in _spool_redactors:
        _spool_redactors[key] = _redactor_of(*key)
    return _spool_redactors[key]


def _redactor_of(enabled: str, patterns: str, disable: str) -> Redactor | None:
    if enabled.strip().lower() in ("false", "0", "no", "off"):
        return None
    try:
        extra = parse_rules(patterns)
    except ValueError:
        extra = []
    left_out = [name.strip() for name in disable.split(",") if name.strip()]
    try:
        return Redactor(extra, disable=left_out)
    except ValueError:
        return Redactor(extra)
