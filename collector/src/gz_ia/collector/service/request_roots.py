"""The session root of what arrives over HTTP (a hook, an export): one that exists, never one it makes.

A request comes from one of the user's own programs (the HTTP side judged its uid and its key), but
what it says is data: a root it names is used only where it already is one, a directory of the
request's uid that is named ``.harness`` (as the user makes one) or that gz-ia already writes (it
holds ``layout.json``). A request never makes a directory: one that names anything else (a path that
does not exist, a file, the user's home, someone else's directory) has its events written to the
fallback root instead (the user's default root, which the collector makes as a client would), and a
warning names what it asked for. Nothing is lost and nothing is created where the request pointed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from gz_ia.client import env
from gz_ia.collector.storage.names import LAYOUT_FILE

__all__ = ["RequestRoot", "default_root", "existing_root", "own_root", "request_root", "root_to_come"]


class RequestRoot:
    """Where a request's events go, and why not where it asked (None: they go where it asked)."""

    __slots__ = ("path", "refused")

    def __init__(self, path: str, refused: str | None = None) -> None:
        self.path = path
        self.refused = refused


def existing_root(path: str, uid: int) -> str | None:
    """Why ``path`` is not an existing root of ``uid`` that a request may name (None: it is one)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be used as a session root ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != uid:
        return f"{path} belongs to uid {info.st_uid}, not to the sender (uid {uid})"
    if os.path.basename(path) != env.HARNESS_DIR and not os.path.lexists(os.path.join(path, LAYOUT_FILE)):
        return f"{path} is neither a .harness directory nor a root gz-ia writes"
    return None


def root_to_come(path: str, uid: int) -> str | None:
    """Why a reader of ``uid`` may not wait for the first event of ``path`` (None: it may).

    A page opened on a workspace before its agent's first event waits for it: the root may be one a
    request could name (:func:`existing_root`), or a ``.harness`` not made yet in a directory of
    ``uid``, as a client makes it at its first event. Anything else (another user's directory, a
    path anywhere else) is refused as before. Waiting reads nothing and makes nothing.
    """
    problem = existing_root(path, uid)
    if problem is None or os.path.lexists(path):
        return problem
    parent = os.path.dirname(path)
    try:
        info = os.lstat(parent)
    except OSError as exc:
        return f"{path} cannot be used as a session root ({exc.strerror or exc})"
    if os.path.basename(path) != env.HARNESS_DIR or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        return f"{path} is not a root this collector writes, nor a .harness to come in a directory of yours"
    return None


def request_root(named: str, cwd: str | None, uid: int, fallback: Callable[[], str]) -> RequestRoot:
    """The root of a request that named ``named`` (its ``$GZ_IA_ROOT``; "" when none), sent from ``cwd``.

    Args:
        named: the root the request names, relative to ``cwd`` if not absolute.
        cwd: the agent's working directory (a hook's ``cwd``), where the nearest ``.harness`` is looked
            for when no root is named; None: none is looked for.
        uid: the request's uid.
        fallback: the root used when none is named or found, or the one named cannot be used.
    """
    start = cwd if cwd is not None and cwd.startswith("/") else None
    named = named.strip()
    if named:
        path = env.normal(named if named.startswith("/") or start is None else f"{start}/{named}")
        problem = existing_root(path, uid)
        if problem is None:
            return RequestRoot(path)
        return RequestRoot(fallback(), problem)
    found = env.harness_above(start) if start is not None else None
    return RequestRoot(found or fallback())


def default_root() -> str:
    """The user's default root (``$XDG_DATA_HOME/gz-ia/.harness``), made if missing, as a client that
    logs there would make it."""
    path = str(env.default_root())
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def own_root() -> str:
    """The root the collector's own environment finds (its ``GZ_IA_ROOT``, else the nearest
    ``.harness`` above where it runs, else the default root), made if missing: the operator's
    choice, not a request's."""
    path = env.locate_root()
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path
