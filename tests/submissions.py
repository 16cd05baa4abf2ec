"""Encoding test submissions the way a producer that knows its blob sizes publishes them.

The scheduler refuses an ActivitySubmission.v1 that carries observations
(EVIDENCE_SIZES_UNDECLARED: the per-run evidence cap cannot count them), so
tests publish v2 whenever their observations declare a ``size``, as the Python
SDK does. A record whose observations lack sizes stays v1 (a test of the v1
path, or of a refusal that comes before the sizes matter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas import codec


def encode_submission(record: Mapping[str, Any]) -> bytes:
    """ActivitySubmission.v2 when every observation declares its ``size`` (also with none), else v1."""
    observations = record.get("observations", [])
    sized = isinstance(observations, list) and all(isinstance(o, Mapping) and "size" in o for o in observations)
    return codec.encode(codec.ACTIVITY_SUBMISSION_V2 if sized else codec.ACTIVITY_SUBMISSION, dict(record))
