"""Log lines of long-running commands: human text (as always) or one JSON object per line.

``--log-format text|json`` (default: ``$BERNSTEIN_LOG_FORMAT``, else ``text``). In ``text``
each event is its message behind the component's prefix (``scheduler p0: ...``), exactly
the lines these commands always printed. In ``json`` each event is one object on one line::

    {"ts": "2026-12-01T21:30:00.123Z", "level": "info", "logger": "bernstein.scheduler",
     "event": "progress", "message": "running: offset 41 | ...", "partition": 0, "consumed": 42, ...}

``ts`` is UTC with milliseconds; ``level`` is ``debug``, ``info``, ``warning`` or ``error``;
``event`` a stable snake_case name (docs/operations.md lists the scheduler's); ``message``
the text line; then the event's own fields. Python ``logging`` records (librdkafka's log,
shown with ``BERNSTEIN_DEBUG=1``) go through the same writer (``install_json_logging``).

What is logged never includes key material: the writer takes what the caller gives it,
and callers log key ids, never keys (a test scans a whole run's logs for every key).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

import orjson

from bernstein.schemas.errors import BernsteinError

LOG_FORMATS: Final = ("text", "json")
ENV_VAR: Final = "BERNSTEIN_LOG_FORMAT"
Level = Literal["debug", "info", "warning", "error"]
_RESERVED: Final = frozenset({"ts", "level", "logger", "event", "message"})


class LogFormatError(BernsteinError):
    """``$BERNSTEIN_LOG_FORMAT`` names no log format."""

    code = "E_LOG_FORMAT"


def log_format(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The flag's format, else ``$BERNSTEIN_LOG_FORMAT``'s, else ``text``."""
    chosen = flag or (os.environ if environ is None else environ).get(ENV_VAR, "").strip().lower() or "text"
    if chosen not in LOG_FORMATS:
        raise LogFormatError(f"{ENV_VAR}={chosen!r}: the log format is text or json")
    return chosen


_WRITE_LOCK = threading.Lock()
"""One lock for every line this process writes to its streams: threads (a ``--group`` process's partitions)
never interleave within a line."""


def write_line(stream: TextIO, line: str) -> None:
    """``line`` and its newline in one write, under the process's one lock."""
    with _WRITE_LOCK:
        stream.write(line + "\n")
        stream.flush()


class EventLog:
    """Writes events of one component to a stream, as text lines or JSON lines (thread-safe)."""

    def __init__(
        self,
        logger: str,
        *,
        json: bool = False,
        stream: TextIO | None = None,
        text_prefix: str = "",
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        self.logger = logger
        self.json = json
        self._stream = stream
        self.text_prefix = text_prefix
        self.fields = dict(fields or {})
        """Fields every JSON event carries (e.g. the partition)."""

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def emit(self, event: str, message: str, *, level: Level = "info", **fields: Any) -> None:
        if self.json:
            record: dict[str, Any] = {
                "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": level,
                "logger": self.logger,
                "event": event,
                "message": message,
            }
            record.update(self.fields)
            record.update((k if k not in _RESERVED else f"{k}_", v) for k, v in fields.items())
            line = orjson.dumps(record, default=str).decode()
        else:
            line = f"{self.text_prefix}{message}"
        write_line(self.stream, line)


class JsonLogHandler(logging.Handler):
    """Python ``logging`` records as JSON events (event ``log``, ``logger`` the record's logger name)."""

    def __init__(self, log: EventLog) -> None:
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        level: Level
        if record.levelno >= logging.ERROR:
            level = "error"
        elif record.levelno >= logging.WARNING:
            level = "warning"
        elif record.levelno >= logging.INFO:
            level = "info"
        else:
            level = "debug"
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the record
            message = str(record.msg)
        EventLog(record.name, json=True, stream=self.log._stream, fields=self.log.fields).emit("log", message, level=level)


def install_json_logging(log: EventLog) -> None:
    """Route Python ``logging`` (and ``warnings``) through ``log`` as JSON lines, instead of text on stderr."""
    handler = JsonLogHandler(log)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    logging.captureWarnings(True)
