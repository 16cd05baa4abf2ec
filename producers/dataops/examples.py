"""Two real jobs the demo runs through the phase machine: a CSV rollup and a config change.

The declared steps are not comments: each job parses its steps into the
operation it performs, so the plan hash commits to the exact transformation
the output was computed from. The transformations are pure (bytes in, bytes
out); the only effect is writing the output file, and ``write_output``
records the output (which enforces "plan first") BEFORE touching the disk.

Data steps (applied in order; integer arithmetic only, no floats)::

    filter <column> == <value>     keep rows whose column equals value (also !=)
    group by <column>[, <column>]  group the kept rows (at most once)
    count                          add a "count" column: rows per group
    sum <column>                   add the integer sum of a column per group

Ops steps::

    set <key> = <value>            replace a key's value; <key> may be
                                   <section>.<key>; a new key is appended
                                   to its section
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bernstein.producers.activity import ActivityRejected, ActivityResult
from bernstein.producers.dataops.activity import DataOpsActivity, DataOpsPhaseError
from bernstein.producers.dataops.receipt import DataOpsReceipt
from bernstein.schemas.errors import BernsteinError, MalformedInput

JOB_FORMAT: Final = "bernstein.dataops.job/v1"
_JOB_FIELDS: Final = frozenset({"format", "kind", "steps", "description"})
VIOLATIONS: Final = ("effect-before-plan", "input-after-plan", "second-plan", "finish-before-plan")


class JobError(ActivityRejected):
    """A job cannot run as declared (bad step, missing column, non-integer amount)."""

    code = "JOB_REJECTED"

    def __init__(self, message: str, *, code: str, evidence: dict[str, str] | None = None) -> None:
        super().__init__(message, code=code, evidence=evidence)


class OutputWriteFailed(BernsteinError):
    code = "E_OUTPUT_WRITE"


@dataclass(frozen=True)
class InputFile:
    """An input's provenance ref and its exact bytes (what gets signed)."""

    ref: str
    content: bytes


@dataclass(frozen=True)
class JobSpec:
    """A job spec file: ``{"format": "bernstein.dataops.job/v1", "kind": "data", "steps": [...]}``."""

    kind: str
    steps: tuple[str, ...]

    @classmethod
    def parse(cls, data: bytes, *, where: str = "job spec") -> JobSpec:
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedInput(f"{where} is not JSON: {exc}") from None
        if not isinstance(document, dict) or document.get("format") != JOB_FORMAT:
            raise MalformedInput(f'{where} must be a JSON object with "format": "{JOB_FORMAT}"')
        unknown = sorted(set(document) - _JOB_FIELDS)
        if unknown:
            # Keys come only from the key directory: a spec cannot carry or name one.
            raise MalformedInput(f"{where} has unknown fields {unknown}; allowed: {sorted(_JOB_FIELDS)}")
        kind, steps = document.get("kind"), document.get("steps")
        if kind not in ("data", "ops"):
            raise MalformedInput(f"{where} kind must be 'data' or 'ops', got {kind!r}")
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise MalformedInput(f"{where} steps must be a list of strings")
        return cls(kind=kind, steps=tuple(steps))


@dataclass(frozen=True)
class JobOutcome:
    """What a job produced: the result to publish, its receipt, and what it wrote."""

    result: ActivityResult
    receipt: DataOpsReceipt
    output_path: Path
    changes: tuple[ConfigChange, ...] = ()


# --------------------------------------------------------------------------
# The effect
# --------------------------------------------------------------------------


def write_output(activity: DataOpsActivity, path: Path, content: bytes, *, ref: str | None = None) -> str:
    """Record ``content`` as a signed output, then write it to ``path`` atomically.

    Recording first means a phase violation (no plan yet) is refused before
    the disk changes: the refused effect never happens.
    """
    digest = activity.add_output(ref or path.name, content)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OutputWriteFailed(f"cannot write output {path}: {exc.strerror}") from exc
    return digest


# --------------------------------------------------------------------------
# Data job: CSV rollup
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Filter:
    column: str
    negate: bool
    value: str


@dataclass(frozen=True)
class _DataPlan:
    filters: tuple[_Filter, ...]
    group_by: tuple[str, ...]
    aggregates: tuple[tuple[str, str], ...]
    """(op, column): ("count", "") or ("sum", column)."""


_FILTER_RE: Final = re.compile(r"filter\s+(\S+)\s*(==|!=)\s*(.*)")
_GROUP_RE: Final = re.compile(r"group\s+by\s+(.+)")
_SUM_RE: Final = re.compile(r"sum\s+(\S+)")
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")


def parse_data_steps(steps: Sequence[str]) -> _DataPlan:
    """Parse data steps into a pipeline; JobError(INVALID_STEP) names the bad step."""
    filters: list[_Filter] = []
    group_by: tuple[str, ...] | None = None
    aggregates: list[tuple[str, str]] = []
    for index, raw in enumerate(steps):
        step = raw.strip()
        if match := _FILTER_RE.fullmatch(step):
            if group_by is not None or aggregates:
                raise _bad_step(index, raw, "filters must come before 'group by' and the aggregates")
            filters.append(_Filter(match[1], match[2] == "!=", match[3].strip()))
        elif match := _GROUP_RE.fullmatch(step):
            if group_by is not None or aggregates:
                raise _bad_step(index, raw, "'group by' may appear once, before the aggregates")
            columns = tuple(c.strip() for c in match[1].split(","))
            if any(c == "" for c in columns):
                raise _bad_step(index, raw, "empty column name")
            group_by = columns
        elif step == "count":
            aggregates.append(("count", ""))
        elif match := _SUM_RE.fullmatch(step):
            aggregates.append(("sum", match[1]))
        else:
            raise _bad_step(index, raw, "expected 'filter <col> == <value>', 'group by <col>', 'count' or 'sum <col>'")
    if not aggregates:
        raise JobError("a data job needs at least one aggregate step ('count' or 'sum <column>')", code="INVALID_STEP")
    return _DataPlan(tuple(filters), group_by or (), tuple(aggregates))


def transform_csv(tables: Sequence[bytes], steps: Sequence[str]) -> bytes:
    """Apply the data steps to one or more CSV tables with the same header; returns CSV bytes.

    Output rows are sorted by the group key so the bytes are reproducible.
    """
    plan = parse_data_steps(steps)
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for number, table in enumerate(tables):
        reader = csv.reader(io.StringIO(_decode(table, number)))
        table_header = next(reader, None)
        if table_header is None:
            raise JobError(f"input {number} is empty (no header row)", code="INVALID_DATA", evidence={"input": str(number)})
        if header is None:
            header = table_header
        elif table_header != header:
            raise JobError(
                f"input {number} has header {table_header}, input 0 has {header}",
                code="INVALID_DATA",
                evidence={"input": str(number)},
            )
        for line, values in enumerate(reader, start=2):
            if not values:
                continue
            if len(values) != len(header):
                raise JobError(
                    f"input {number} line {line} has {len(values)} fields, the header has {len(header)}",
                    code="INVALID_DATA",
                    evidence={"input": str(number), "line": str(line)},
                )
            rows.append(dict(zip(header, values, strict=True)))
    assert header is not None or not tables
    columns = set(header or ())
    needed = [f.column for f in plan.filters] + list(plan.group_by) + [c for op, c in plan.aggregates if op == "sum"]
    for column in needed:
        if column not in columns:
            raise JobError(
                f"no column {column!r} in the input (columns: {header})", code="UNKNOWN_COLUMN", evidence={"column": column}
            )

    kept = [r for r in rows if all((r[f.column] == f.value) != f.negate for f in plan.filters)]
    groups: dict[tuple[str, ...], list[int]] = {}
    for row in kept:
        key = tuple(row[c] for c in plan.group_by)
        totals = groups.setdefault(key, [0] * len(plan.aggregates))
        for slot, (op, column) in enumerate(plan.aggregates):
            totals[slot] += 1 if op == "count" else _integer(row[column], column)
    if not plan.group_by and not groups:
        groups[()] = [0] * len(plan.aggregates)

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*plan.group_by, *(column or op for op, column in plan.aggregates)])
    for key in sorted(groups):
        writer.writerow([*key, *groups[key]])
    return out.getvalue().encode("utf-8")


def run_data_job(activity: DataOpsActivity, inputs: Sequence[InputFile], steps: Sequence[str], output: Path) -> JobOutcome:
    """Inputs -> plan -> rollup -> output file -> signed receipt."""
    for item in inputs:
        activity.add_input(item.ref, item.content)
    parse_data_steps(steps)  # refuse a bad step before the plan commits to it
    activity.plan(steps)
    content = transform_csv([item.content for item in inputs], steps)
    write_output(activity, output, content)
    result, receipt = activity.finish()
    return JobOutcome(result, receipt, output)


def _integer(value: str, column: str) -> int:
    text = value.strip()
    if not _INT_RE.fullmatch(text):
        raise JobError(
            f"column {column!r} holds {value!r}, not an integer (amounts are integer minor units, e.g. cents)",
            code="INVALID_DATA",
            evidence={"column": column, "value": value[:100]},
        )
    return int(text)


def _decode(data: bytes, number: int) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JobError(f"input {number} is not UTF-8: {exc}", code="INVALID_DATA", evidence={"input": str(number)}) from None


def _bad_step(index: int, step: str, why: str) -> JobError:
    return JobError(f"step {index} {step!r}: {why}", code="INVALID_STEP", evidence={"index": str(index), "step": step[:200]})


# --------------------------------------------------------------------------
# Ops job: config change
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigChange:
    """One applied ``set``: the key, its value before (None: added) and after."""

    key: str
    before: str | None
    after: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "before": self.before, "after": self.after}


_SET_RE: Final = re.compile(r"set\s+([^\s=]+)\s*=\s*(.*)")
_SECTION_RE: Final = re.compile(r"\s*\[([^\]]+)\]\s*")
_ENTRY_RE: Final = re.compile(r"(\s*)([^\s=#;\[][^=]*?)(\s*=\s*)(.*?)(\s*)")


def parse_ops_steps(steps: Sequence[str]) -> list[tuple[str, str]]:
    """Parse ``set <key> = <value>`` steps; JobError(INVALID_STEP) names the bad step."""
    parsed = []
    for index, raw in enumerate(steps):
        match = _SET_RE.fullmatch(raw.strip())
        if match is None:
            raise _bad_step(index, raw, "expected 'set <key> = <value>'")
        if any(ch in raw for ch in "\r\n"):
            raise _bad_step(index, raw, "a value may not contain a line break")
        parsed.append((match[1], match[2].strip()))
    if not parsed:
        raise JobError("an ops job needs at least one 'set <key> = <value>' step", code="INVALID_STEP")
    return parsed


def apply_config(config: bytes, steps: Sequence[str]) -> tuple[bytes, tuple[ConfigChange, ...]]:
    """Apply ``set`` steps to an INI-style config, keeping every other byte as it was.

    A key is found by its name or by ``<section>.<name>`` and must match one
    entry; an unknown ``<section>.<name>`` is appended to that section, and
    an unknown bare name only to a file without sections.
    """
    text = _decode(config, 0)
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines()
    changes = []
    for key, value in parse_ops_steps(steps):
        entries = _config_entries(lines)
        matches = [e for e in entries if key in (e.name, f"{e.section}.{e.name}" if e.section else e.name)]
        if len(matches) > 1:
            where = ", ".join(f"[{m.section}]" if m.section else "top level" for m in matches)
            raise JobError(
                f"key {key!r} is ambiguous (in {where}); write <section>.<key>", code="INVALID_STEP", evidence={"key": key}
            )
        if matches:
            entry = matches[0]
            match = _ENTRY_RE.fullmatch(lines[entry.line])
            assert match is not None
            lines[entry.line] = f"{match[1]}{match[2]}{match[3]}{value}{match[5]}"
            changes.append(ConfigChange(key, match[4], value))
            continue
        sections = _sections(lines)
        section, _, name = key.partition(".") if "." in key else ("", "", key)
        if section and section in sections:
            insert_at = _section_end(lines, sections[section])
            lines.insert(insert_at, f"{name} = {value}")
        elif not sections:
            lines.append(f"{key} = {value}")
        else:
            raise JobError(
                f"no key {key!r} in the config; add a new key as <section>.<key> (sections: {sorted(sections)})",
                code="UNKNOWN_CONFIG_KEY",
                evidence={"key": key},
            )
        changes.append(ConfigChange(key, None, value))
    ending = newline if text.endswith(("\n", "\r")) or not text else ""
    return (newline.join(lines) + ending).encode("utf-8"), tuple(changes)


def run_ops_job(activity: DataOpsActivity, inputs: Sequence[InputFile], steps: Sequence[str], output: Path) -> JobOutcome:
    """Config before (input) -> plan -> changed copy (output) -> signed receipt."""
    if len(inputs) != 1:
        raise JobError(f"an ops config job takes exactly one input config file, got {len(inputs)}", code="INVALID_INPUTS")
    activity.add_input(inputs[0].ref, inputs[0].content)
    parse_ops_steps(steps)
    activity.plan(steps)
    content, changes = apply_config(inputs[0].content, steps)
    write_output(activity, output, content)
    result, receipt = activity.finish()
    return JobOutcome(result, receipt, output, changes)


@dataclass(frozen=True)
class _Entry:
    section: str
    name: str
    line: int


def _config_entries(lines: Sequence[str]) -> list[_Entry]:
    entries, section = [], ""
    for number, line in enumerate(lines):
        if line.strip().startswith(("#", ";")) or not line.strip():
            continue
        if header := _SECTION_RE.fullmatch(line):
            section = header[1].strip()
        elif entry := _ENTRY_RE.fullmatch(line):
            entries.append(_Entry(section, entry[2], number))
    return entries


def _sections(lines: Sequence[str]) -> dict[str, int]:
    return {m[1].strip(): n for n, line in enumerate(lines) if (m := _SECTION_RE.fullmatch(line))}


def _section_end(lines: Sequence[str], header_line: int) -> int:
    """Line index just after the section's last non-blank line."""
    end = header_line + 1
    for number in range(header_line + 1, len(lines)):
        if _SECTION_RE.fullmatch(lines[number]):
            break
        if lines[number].strip():
            end = number + 1
    return end


# --------------------------------------------------------------------------
# Deliberate misorder (demo of a recorded refusal)
# --------------------------------------------------------------------------


def misordered_job(
    activity: DataOpsActivity, violation: str, inputs: Sequence[InputFile], steps: Sequence[str], output: Path
) -> None:
    """Run a job that breaks the phase order on purpose; always raises DataOpsPhaseError.

    Shows the refusal path end to end: the CLI publishes ``refused_result``.
    """
    if violation not in VIOLATIONS:
        raise ValueError(f"unknown violation {violation!r}; one of {VIOLATIONS}")
    for item in inputs:
        activity.add_input(item.ref, item.content)
    if violation == "effect-before-plan":
        write_output(activity, output, b"written before any plan\n")
    elif violation == "finish-before-plan":
        activity.finish()
    activity.plan(steps)
    if violation == "second-plan":
        activity.plan([*steps, "one more step"])
    elif violation == "input-after-plan":
        activity.add_input("late-input", b"an input that arrived after the plan\n")
    raise AssertionError("unreachable: the phase machine must have refused")  # pragma: no cover


__all__ = [
    "ConfigChange",
    "DataOpsPhaseError",
    "InputFile",
    "JobError",
    "JobOutcome",
    "JobSpec",
    "apply_config",
    "misordered_job",
    "parse_data_steps",
    "parse_ops_steps",
    "run_data_job",
    "run_ops_job",
    "transform_csv",
    "write_output",
]
