"""Re-export of the session's recorded documents from ``schemas.documents.browser`` (their one home)."""

from __future__ import annotations

from schemas.documents.browser import (
    ACTION_LOG_FORMAT,
    ActionLog,
    ActionRecord,
    LoggedAction,
    SessionDocument,
    action_log_bytes,
    parse_action_log,
    parse_session_document,
    session_document,
)

__all__ = [
    "ACTION_LOG_FORMAT",
    "ActionLog",
    "ActionRecord",
    "LoggedAction",
    "SessionDocument",
    "action_log_bytes",
    "parse_action_log",
    "parse_session_document",
    "session_document",
]
