"""Questions over a session root: time expressions, field matches, ``--grep``, session filters.

Like the reader, this package imports only the standard library, msgspec and ``gz_ia.client``.
"""

from __future__ import annotations

from ._match import KNOWN_FIELDS as KNOWN_FIELDS
from ._match import FieldMatches as FieldMatches
from ._match import Selection as Selection
from ._match import compile_grep as compile_grep
from ._match import parse_matches as parse_matches
from ._match import parse_seq_range as parse_seq_range
from ._scan import narrows as narrows
from ._scan import search as search
from ._scan import search_lines as search_lines
from ._sessions import SessionQuery as SessionQuery
from ._sessions import select_sessions as select_sessions
from ._time import parse_span as parse_span
from ._time import parse_time as parse_time

__all__ = [
    "KNOWN_FIELDS",
    "FieldMatches",
    "Selection",
    "SessionQuery",
    "compile_grep",
    "narrows",
    "parse_matches",
    "parse_seq_range",
    "parse_span",
    "parse_time",
    "search",
    "search_lines",
    "select_sessions",
]
