"""Encoding test submissions the way the Python SDK publishes them: sized and signed.

The scheduler refuses an unsigned submission (SUBMISSION_UNSIGNED: ActivitySubmission.v1
and v2 carry no producer signature) before any stage or document rule, so a hand-built
record that is to reach those rules is published as the SDK does: an
ActivitySubmission.v3 signed with the test identity of its ``producer.id``
(``tests.support.producers``, which every test manifest and ``TEST_PRODUCERS`` register). An
observation built without a ``size`` declares 0 (a hand-built record whose blob was never
stored; the document rules do not look at sizes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.support.producers import encode_signed_submission


def encode_submission(record: Mapping[str, Any]) -> bytes:
    """``record`` as a signed ActivitySubmission.v3; observations without a ``size`` declare 0."""
    observations = [{**o, "size": o.get("size", 0)} for o in record.get("observations", [])]
    return encode_signed_submission({**record, "observations": observations})
