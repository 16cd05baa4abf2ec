"""Activity descriptions: one JSON object per line that says what to publish (``bernstein submit``).

The format is shared by ``bernstein submit``, ``bernstein submission check`` and the Go and
TypeScript SDKs' ``emit`` commands (docs/producing.md). A line is either a stage::

    {"run_id": "run-42", "stage_id": "research-0", "role": "scout", "kind": "research",
     "artifact": <any JSON value>  |  "artifact_file": "path"  |  "artifact_base64": "...",
     "observations": [{"kind": "page", "ref": "https://...", "file": "path" | "text": "..." | "base64": "..."}],
     "terminal_state": "completed", "reason_code": "ok",
     "submission_id": "...", "occurred_at_ms": 123,
     "artifact_hash": "sha256:..."}

or a run close, ``{"close_run": "run-42", "submission_id": "..."}``. ``artifact`` is published as
its RFC 8785 canonical JSON bytes; ``artifact_file`` and an observation's ``file`` are read as
bytes, relative to the current directory; ``artifact_hash`` (testing only) is published as given
instead of the computed hash, so the scheduler refuses the stage (ARTIFACT_HASH_MISMATCH).
``observations`` defaults to none, ``terminal_state`` to ``completed``, ``reason_code`` to
``ok``, ``submission_id`` to a fresh uuid4 and ``occurred_at_ms`` to now. Blank lines are skipped.

Every mistake is a ``DescriptionError`` naming the line and the field; nothing is read from the
network. ``signed_value`` turns a description into the exact ActivitySubmission.v3 / RunClose.v2
bytes a producer publishes, with the checks the Python emitter makes before publishing.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from bernstein.producers.activity import ActivityRejected, ActivityResult, observe, require_valid_ids
from bernstein.producers.emitter import SDK, encode_signed_close, encode_signed_submission, submission_record
from bernstein.schemas.canonical import canonical_json
from bernstein.schemas.errors import BernsteinError, CanonicalizationError
from bernstein.schemas.records import Observation, TerminalState
from bernstein.substrate.keys import Ed25519Signer

STAGE_FIELDS: Final = frozenset(
    {
        "run_id",
        "stage_id",
        "role",
        "kind",
        "artifact",
        "artifact_file",
        "artifact_base64",
        "observations",
        "terminal_state",
        "reason_code",
        "submission_id",
        "occurred_at_ms",
        "artifact_hash",
    }
)
CLOSE_FIELDS: Final = frozenset({"close_run", "submission_id"})
OBSERVATION_FIELDS: Final = frozenset({"kind", "ref", "file", "text", "base64"})
_ARTIFACT_SOURCES: Final = ("artifact", "artifact_file", "artifact_base64")
_OBSERVATION_SOURCES: Final = ("file", "text", "base64")
MAX_SAFE_INT: Final = 2**53 - 1


class DescriptionError(BernsteinError):
    """A description line that cannot be published: the message names the line and the field."""

    code = "E_DESCRIPTION"

    def __init__(self, message: str, *, line: int, field: str = "") -> None:
        where = f"line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.line = line
        self.field = field
        self.reason = message


@dataclass(frozen=True)
class ObservedBytes:
    """One observation of a stage: its kind, its ref (provenance) and the bytes behind it."""

    kind: str
    ref: str
    data: bytes


@dataclass(frozen=True)
class StageDescription:
    """A stage to publish (an ActivitySubmission.v3)."""

    line: int
    run_id: str
    stage_id: str
    role: str
    kind: str
    artifact: bytes
    observations: tuple[ObservedBytes, ...] = ()
    terminal_state: str = TerminalState.COMPLETED.value
    reason_code: str = "ok"
    submission_id: str | None = None
    occurred_at_ms: int | None = None
    artifact_hash: str | None = None
    """TESTING ONLY: published instead of the artifact's computed hash (the scheduler refuses the stage)."""

    @property
    def blobs(self) -> list[bytes]:
        """Every byte string to store before publishing: the observations' and the artifact."""
        return [o.data for o in self.observations] + [self.artifact]


@dataclass(frozen=True)
class CloseDescription:
    """A run close (a RunClose.v2)."""

    line: int
    run_id: str
    submission_id: str | None = None


Description = StageDescription | CloseDescription


def parse_descriptions(lines: Iterable[str], *, cwd: Path | None = None) -> Iterator[Description]:
    """Every non-blank line of ``lines`` (numbered from 1) as a description; files relative to ``cwd``."""
    base = cwd if cwd is not None else Path.cwd()
    for number, text in enumerate(lines, start=1):
        if text.strip():
            yield parse_description(text, line=number, cwd=base)


def parse_description(text: str, *, line: int = 1, cwd: Path | None = None) -> Description:
    """One description line."""
    base = cwd if cwd is not None else Path.cwd()
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys(line), parse_constant=_no_constant(line))
    except json.JSONDecodeError as exc:
        raise DescriptionError(f"not JSON: {exc.msg} at column {exc.colno}", line=line) from None
    except RecursionError:
        raise DescriptionError("not JSON this parser can read (nested too deeply)", line=line) from None
    if not isinstance(document, dict):
        raise DescriptionError(f"a description is a JSON object, not {_json_type(document)}", line=line)
    if "close_run" in document:
        return _close(document, line)
    return _stage(document, line, base)


def _close(document: dict[str, Any], line: int) -> CloseDescription:
    unknown = sorted(set(document) - CLOSE_FIELDS)
    if unknown:
        raise DescriptionError(
            f"a run close takes only close_run and submission_id; unknown: {', '.join(unknown)}", line=line, field=unknown[0]
        )
    return CloseDescription(
        line,
        _string(document, "close_run", line),
        _optional_string(document, "submission_id", line),
    )


def _stage(document: dict[str, Any], line: int, cwd: Path) -> StageDescription:
    unknown = sorted(set(document) - STAGE_FIELDS)
    if unknown:
        raise DescriptionError(
            f"unknown field; a stage takes {', '.join(sorted(STAGE_FIELDS))} (a run close: close_run, submission_id)",
            line=line,
            field=unknown[0],
        )
    run_id, stage_id, role, kind = (_string(document, name, line) for name in ("run_id", "stage_id", "role", "kind"))
    given = [name for name in _ARTIFACT_SOURCES if name in document]
    if len(given) != 1:
        raise DescriptionError(
            "give exactly one of artifact, artifact_file, artifact_base64" + (f" (got {', '.join(given)})" if given else ""),
            line=line,
            field=given[1] if len(given) > 1 else "artifact",
        )
    source = given[0]
    if source == "artifact":
        try:
            artifact = canonical_json(document["artifact"])
        except CanonicalizationError as exc:
            raise DescriptionError(f"has no RFC 8785 canonical JSON form: {exc.message}", line=line, field="artifact") from None
    elif source == "artifact_file":
        artifact = _read_file(_string(document, "artifact_file", line), cwd, line, "artifact_file")
    else:
        artifact = _base64(_string(document, "artifact_base64", line), line, "artifact_base64")
    observations = document.get("observations", [])
    if not isinstance(observations, list):
        raise DescriptionError(f"must be a list, not {_json_type(observations)}", line=line, field="observations")
    occurred = document.get("occurred_at_ms")
    if occurred is not None and (type(occurred) is not int or not 0 <= occurred <= MAX_SAFE_INT):
        raise DescriptionError(
            f"must be an integer of milliseconds since the epoch (0 to {MAX_SAFE_INT}), not {json.dumps(occurred)}",
            line=line,
            field="occurred_at_ms",
        )
    return StageDescription(
        line=line,
        run_id=run_id,
        stage_id=stage_id,
        role=role,
        kind=kind,
        artifact=artifact,
        observations=tuple(_observation(item, index, line, cwd) for index, item in enumerate(observations)),
        terminal_state=_optional_string(document, "terminal_state", line) or TerminalState.COMPLETED.value,
        reason_code=_optional_string(document, "reason_code", line) or "ok",
        submission_id=_optional_string(document, "submission_id", line),
        occurred_at_ms=occurred,
        artifact_hash=_optional_string(document, "artifact_hash", line),
    )


def _observation(item: object, index: int, line: int, cwd: Path) -> ObservedBytes:
    where = f"observations[{index}]"
    if not isinstance(item, dict):
        raise DescriptionError(f"an observation is a JSON object, not {_json_type(item)}", line=line, field=where)
    unknown = sorted(set(item) - OBSERVATION_FIELDS)
    if unknown:
        raise DescriptionError(
            "unknown field; an observation takes kind, ref and one of file, text, base64",
            line=line,
            field=f"{where}.{unknown[0]}",
        )
    given = [name for name in _OBSERVATION_SOURCES if name in item]
    if len(given) != 1:
        raise DescriptionError("give exactly one of file, text, base64 (the observed bytes)", line=line, field=where)
    kind = _string(item, "kind", line, where)
    ref = _string(item, "ref", line, where)
    source = given[0]
    value = _string(item, source, line, where)
    if source == "file":
        data = _read_file(value, cwd, line, f"{where}.file")
    elif source == "text":
        data = value.encode("utf-8", "surrogatepass")
    else:
        data = _base64(value, line, f"{where}.base64")
    return ObservedBytes(kind, ref, data)


# ---------------------------------------------------------------------------
# from a description to the bytes a producer publishes
# ---------------------------------------------------------------------------


def stage_result(stage: StageDescription) -> ActivityResult:
    """The stage's ActivityResult, checked as the Python SDK checks one (ids, kind, state, reason code, size).

    With ``artifact_hash`` the result carries that hash instead of the computed one (testing refusals).
    """
    try:
        require_valid_ids(("run_id", stage.run_id), ("stage_id", stage.stage_id), ("role", stage.role))
        observations = [_observed(o) for o in stage.observations]
        result = ActivityResult.build(
            stage.kind,
            stage.artifact,
            observations,
            terminal_state=stage.terminal_state,
            reason_code=stage.reason_code,
        )
    except ActivityRejected as exc:
        raise DescriptionError(f"{exc.message} ({exc.code})", line=stage.line, field=_field_of(exc.code)) from None
    if stage.artifact_hash is not None:
        result = replace(result, artifact_hash=stage.artifact_hash)
    return result


def _observed(observed: ObservedBytes) -> Observation:
    return observe(observed.kind, observed.ref, observed.data)


def signed_value(
    description: Description, *, producer_id: str, signer: Ed25519Signer, now_ms: int | None = None, sdk: str = SDK
) -> tuple[str, str, bytes]:
    """(run id, submission id, value): the signed ActivitySubmission.v3 or RunClose.v2 of ``description``.

    ``now_ms`` (default: the clock) is ``occurred_at_ms`` when the description gives none; the
    submission id defaults to a fresh uuid4.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    sid = description.submission_id or uuid.uuid4().hex
    if isinstance(description, CloseDescription):
        try:
            require_valid_ids(("run_id", description.run_id))
        except ActivityRejected as exc:
            raise DescriptionError(f"{exc.message} ({exc.code})", line=description.line, field="close_run") from None
        value = encode_signed_close(
            submission_id=sid, run_id=description.run_id, producer_id=producer_id, occurred_at_ms=now, signer=signer, sdk=sdk
        )
        return description.run_id, sid, value
    result = stage_result(description)
    record = submission_record(
        result,
        submission_id=sid,
        run_id=description.run_id,
        stage_id=description.stage_id,
        role=description.role,
        producer_id=producer_id,
        sdk=sdk,
    )
    record["occurred_at_ms"] = description.occurred_at_ms if description.occurred_at_ms is not None else now
    return description.run_id, sid, encode_signed_submission(record, signer)


# ---------------------------------------------------------------------------
# field readers
# ---------------------------------------------------------------------------


def _string(document: dict[str, Any], name: str, line: int, parent: str = "") -> str:
    field = f"{parent}.{name}" if parent else name
    if name not in document:
        raise DescriptionError("is required", line=line, field=field)
    value = document[name]
    if not isinstance(value, str):
        raise DescriptionError(f"must be a string, not {_json_type(value)}", line=line, field=field)
    return value


def _optional_string(document: dict[str, Any], name: str, line: int) -> str | None:
    if document.get(name) is None:
        return None
    return _string(document, name, line)


def _read_file(path_text: str, cwd: Path, line: int, field: str) -> bytes:
    path = Path(path_text)
    if not path.is_absolute():
        path = cwd / path
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DescriptionError(f"no such file: {path}", line=line, field=field) from None
    except IsADirectoryError:
        raise DescriptionError(f"is a directory, not a file: {path}", line=line, field=field) from None
    except OSError as exc:
        raise DescriptionError(f"cannot read {path}: {exc.strerror or exc}", line=line, field=field) from None


def _base64(text: str, line: int, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise DescriptionError("is not standard base64 (RFC 4648, with padding)", line=line, field=field) from None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _field_of(code: str) -> str:
    return {
        "INVALID_RUN_ID": "run_id",
        "INVALID_STAGE_ID": "stage_id",
        "INVALID_ROLE": "role",
        "UNKNOWN_KIND": "kind",
        "UNKNOWN_TERMINAL_STATE": "terminal_state",
        "EMPTY_REASON_CODE": "reason_code",
        "INVALID_REASON_CODE": "reason_code",
        "ARTIFACT_TOO_LARGE": "artifact",
    }.get(code, "")


def _unique_keys(line: int) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise DescriptionError("is given twice", line=line, field=key)
            result[key] = value
        return result

    return hook


def _no_constant(line: int) -> Any:
    def hook(name: str) -> None:
        raise DescriptionError(f"{name} is not JSON", line=line)

    return hook
