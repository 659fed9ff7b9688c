"""The one-shot's own MessagePack, JSON and paths held to what they stand in for: msgspec, json,
gz_ia.client.env. Each direction is a property over generated values."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gz_ia.client import build_event, env, limits, protocol, schema, spool
from gz_ia.collector.oneshot import _plain_json, ledger
from gz_ia.collector.oneshot._msgpack import Raw, Timestamp, pack, unpack
from gz_ia.collector.oneshot.session_log import _plain

_INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_SCALARS = st.none() | st.booleans() | _INT64 | _FLOATS | st.text()
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(), inner, max_size=20), max_leaves=60
)


@given(_VALUES)
def test_pack_writes_msgspecs_bytes_and_msgspec_reads_them_back(value: Any) -> None:
    assert pack(value) == msgspec.msgpack.encode(value)
    assert msgspec.msgpack.decode(pack(value)) == value


@pytest.mark.parametrize("value", [math.inf, -math.inf, -0.0, math.nan, 2**64 - 1, -(2**63)])
def test_pack_writes_msgspecs_bytes_for_the_edges(value: float) -> None:
    assert pack(value) == msgspec.msgpack.encode(value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1])
def test_pack_refuses_ints_outside_64_bits(value: int) -> None:
    with pytest.raises(OverflowError):
        pack(value)


@given(st.recursive(_SCALARS | st.binary(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_unpack_reads_what_msgspec_writes(value: Any) -> None:
    assert unpack(msgspec.msgpack.encode(value)) == value


@given(st.integers(min_value=-(2**40), max_value=2**40).map(lambda us: us * 1000))
def test_a_timestamp_packs_as_msgspec_packs_the_datetime(nanoseconds: int) -> None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanoseconds // 1000)
    assert pack(Timestamp(nanoseconds)) == msgspec.msgpack.encode(moment)


@pytest.mark.parametrize("data", [b"", b"\x92\x01", b"\x01\x02", b"\xc1", b"\xd9\x05ab", b"\xc7\x01\x05x"])
def test_unpack_refuses_what_is_not_one_whole_value(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"MessagePack|after the"):
        unpack(data)


_IDS = st.text(alphabet="abcXYZ019_-.", min_size=1, max_size=140)
_TEXT = st.text(max_size=40) | st.text(min_size=500, max_size=1100)
_ATTRS = st.dictionaries(
    st.text(max_size=70),
    # Any int and float: those JSON cannot carry become the same strings on both paths (storable()).
    st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | _TEXT,
    max_size=34,
)


@given(
    session_id=_IDS,
    parent=st.none() | _IDS,
    action=_TEXT.filter(bool),
    stage=st.sampled_from(limits.STAGES),
    failed=st.booleans(),
    agent=_TEXT.filter(bool),
    role=st.none() | _TEXT,
    duration=st.none() | st.integers(min_value=0, max_value=2**53),
    error=st.none() | _TEXT | st.integers(16_380, 16_400).map(lambda size: "é" * size),
    attrs=st.none() | _ATTRS,
    cycle=st.none() | _IDS,
    root=st.none() | _IDS,
    microseconds=st.integers(min_value=0, max_value=2**50),
)
def test_a_plain_event_packs_as_the_log_event_build_event_makes(
    session_id: str,
    parent: str | None,
    action: str,
    stage: str,
    failed: bool,
    agent: str,
    role: str | None,
    duration: int | None,
    error: str | None,
    attrs: dict[str, Any] | None,
    cycle: str | None,
    root: str | None,
    microseconds: int,
) -> None:
    """Same fields, same cutting of long text, same bytes; and the FAILED rule holds the same."""
    fields: dict[str, Any] = {
        "session_id": session_id, "parent_session_id": parent, "action": action, "stage": stage,
        "status": "FAILED" if failed else "OK", "agent": agent, "role": role, "duration_ms": duration,
        "error": error, "attrs": attrs, "cycle": cycle, "root_session_id": root,
    }  # fmt: skip
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=microseconds)
    try:
        expected = build_event(**fields, timestamp=moment)
    except ValueError:
        with pytest.raises(ValueError, match="FAILED requires"):
            ledger.plain_event(**fields, timestamp_ns=microseconds * 1000)
        return
    event = ledger.plain_event(**fields, timestamp_ns=microseconds * 1000 + 999)  # nanoseconds are dropped
    assert pack(event) == msgspec.msgpack.encode(expected)
    assert pack(_plain(expected)) == msgspec.msgpack.encode(expected)  # the click CLI's LogEvent, converted


@given(producer=st.text(max_size=40), root=st.text(max_size=300))
def test_the_hello_frame_is_msgspecs(producer: str, root: str) -> None:
    hello = protocol.Hello(proto=protocol.PROTOCOL_VERSION, producer=producer, pid=os.getpid(), root=root)
    assert ledger.hello_frame(producer, root) == protocol.encode_frame(hello)


# The events are bodies already packed (their packing is tested above): a few say as much as many.
@given(first=st.integers(min_value=1, max_value=2**64 - 1), events=st.lists(_VALUES, max_size=3))
def test_the_batch_frame_is_msgspecs(first: int, events: list[Any]) -> None:
    bodies = [msgspec.msgpack.encode(event) for event in events]
    batch = protocol.Batch(first=first, events=[msgspec.Raw(body) for body in bodies], verdicts=True)
    assert ledger.batch_frame(first, bodies) == protocol.encode_frame(batch)
    assert pack(Raw(b"\xc0")) == b"\xc0"


@given(
    producer=st.text(max_size=40),
    root=st.text(max_size=200),
    first=st.integers(min_value=1, max_value=2**63 - 1),
    events=st.lists(st.tuples(st.text(max_size=40), _VALUES), max_size=3),
)
def test_a_spool_segment_is_the_client_spools(producer: str, root: str, first: int, events: list[Any]) -> None:
    """The one-shot's spool segment, packed without msgspec, is the bytes the client's spool writes."""
    sessions = [session for session, _ in events]
    bodies = [msgspec.msgpack.encode(event) for _, event in events]
    header = spool.SpoolHeader(version=spool.SPOOL_VERSION, producer=producer, root=root, socket="/run/s.sock")
    expected = spool.frame_record(header) + b"".join(
        spool.frame_record(spool.SpoolRecord(pseq=first + index, session_id=session, body=msgspec.Raw(body)))
        for index, (session, body) in enumerate(zip(sessions, bodies, strict=True))
    )
    assert ledger.spool_segment(producer, root, "/run/s.sock", first, sessions, bodies) == expected
    assert ledger.SPOOL_VERSION == spool.SPOOL_VERSION


_REASONS = st.sampled_from(list(protocol.RejectReason))
_REPLIES = (
    st.builds(protocol.Welcome, proto=st.integers(0, 2**32), version=st.text(), max_frame=_INT64, shares=_INT64)
    | st.builds(
        protocol.Verdicts,
        first=st.integers(0, 2**64 - 1),
        count=st.integers(0, 2**32),
        seqs=st.lists(st.integers(-1, 2**63 - 1)),
        rejected=st.lists(st.builds(protocol.Rejection, st.integers(0, 4096), _REASONS, st.text())),
    )
    | st.builds(protocol.Error, reason=_REASONS, detail=st.text(), fatal=st.booleans())
)


@given(_REPLIES)
def test_a_reply_reads_as_msgspec_reads_it(message: Any) -> None:
    body = protocol.encode_frame(message)[protocol.HEADER_SIZE :]
    assert ledger.reply(body) == msgspec.to_builtins(protocol.collector_message_decoder.decode(body))


@pytest.mark.parametrize("body", [msgspec.msgpack.encode([1]), msgspec.msgpack.encode({"type": "report", "data": {}})])
def test_anything_but_a_reply_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="unexpected reply"):
        ledger.reply(body)


def test_the_stage_and_status_names_are_the_schemas() -> None:
    assert tuple(schema.Stage) == limits.STAGES and tuple(schema.Status) == limits.STATUSES
    permanent = {protocol.RejectReason(reason) for reason in ledger._PERMANENT}
    assert permanent <= set(protocol.RejectReason)


# --- JSON --------------------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _FLOATS | st.text(),
    lambda inner: st.lists(inner, max_size=10) | st.dictionaries(st.text(), inner, max_size=10),
    max_leaves=40,
)


@given(_JSON, st.sampled_from([None, 2]))
def test_plain_json_reads_what_json_writes_and_writes_what_json_reads(value: Any, indent: int | None) -> None:
    document = json.dumps(value, indent=indent, ensure_ascii=indent is None)
    assert _plain_json.loads(document.encode()) == json.loads(document)
    assert json.loads(_plain_json.dumps(value)) == value


@pytest.mark.parametrize("document", ["", "{", "[1] 2", "NaN", "[Infinity]", '{"a": 1,}', "\xff"])
def test_plain_json_refuses_what_is_not_strict_json(document: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - json's own errors are ValueErrors of several kinds
        _plain_json.loads(document.encode("latin-1"))


def test_plain_json_writes_no_float_that_is_not_json() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        _plain_json.dumps({"x": math.inf})


# --- where things are ----------------------------------------------------------------------------------

_PATHS = st.text(alphabet="/.ab", max_size=12)


@given(_PATHS)
def test_normal_and_absolute_write_paths_as_pathlib_does(path: str) -> None:
    assert env.normal(path) == str(PurePosixPath(path))
    assert env.absolute(path or ".") == str(Path(path or ".").absolute())


@given(st.text(max_size=140))
def test_the_parent_variable_is_checked_with_the_schemas_session_id_rule(value: str) -> None:
    assert env._is_session_id(value) == schema.is_safe_session_id(value)


def _home() -> Path:
    try:
        return Path.home()
    except RuntimeError:
        return Path(f"/tmp/gz-ia-{os.getuid()}/home")


def _pathlib_root(start: Path | None) -> Path:
    """find_root's rule written with pathlib, as a reference for env's str one."""
    if os.environ.get("GZ_IA_ROOT"):
        return Path(os.environ["GZ_IA_ROOT"]).absolute()
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        if (directory / ".harness").is_dir():
            return directory / ".harness"
    return Path(os.environ.get("XDG_DATA_HOME") or str(_home() / ".local" / "share")) / "gz-ia" / ".harness"


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"GZ_IA_SOCKET": "/run/x//gz.sock", "GZ_IA_SPOOL_DIR": "spool/", "GZ_IA_ROOT": "rel/.harness/"},
        {"XDG_RUNTIME_DIR": "/run/user/7/", "XDG_STATE_HOME": "/state", "XDG_DATA_HOME": "/data/"},
        {"GZ_IA_SOCKET": "", "XDG_RUNTIME_DIR": "", "HOME": "/home/someone/"},
    ],
)
def test_places_are_found_as_pathlib_would_spell_them(
    variables: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GZ_IA_SOCKET", "GZ_IA_SPOOL_DIR", "GZ_IA_ROOT", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "work" / ".harness").mkdir(parents=True)
    (tmp_path / "work" / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work" / "deep")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    socket = os.environ.get("GZ_IA_SOCKET") or (
        f"{runtime}/gz-ia/collector.sock" if runtime else f"/tmp/gz-ia-{os.getuid()}/collector.sock"
    )
    assert env.locate_socket() == str(Path(socket)) == str(env.default_socket_path())
    state = os.environ.get("XDG_STATE_HOME") or str(_home() / ".local" / "state")
    spool = os.environ.get("GZ_IA_SPOOL_DIR") or str(Path(state) / "gz-ia" / "spool")
    assert env.locate_spool() == str(Path(spool)) == str(env.default_spool_dir())
    for start in (None, str(tmp_path / "work" / "deep" / "er"), "/", str(tmp_path)):
        expected = str(_pathlib_root(None if start is None else Path(start)))
        assert env.locate_root(start) == expected == str(env.find_root(None if start is None else Path(start)))
