"""Hypothesis inputs for the scheduler-core fuzz tests (``test_scheduler_core``, ``test_native_core``).

Record values the core must survive: no value, random bytes, a known or random
schema fingerprint over random bytes, byte-level mutations of valid records,
the valid records themselves, schema-valid submissions and computer-use actions
whose field values are hostile (some consistent enough to be accepted), and run
closes for hostile run ids. Each value comes with a key (none, or up to 8 bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bernstein.schemas import codec
from bernstein.schemas.canonical import evidence_set_hash, sha256_digest

FUZZ_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

IDS = st.one_of(
    st.sampled_from(["run-1", "run-2", "s1", "s2", "scout", "developer", "ghost", "", "-x", "a" * 129]),
    st.text(max_size=12),
)
DIGESTS = st.one_of(
    st.sampled_from([sha256_digest(b"a"), sha256_digest(b"b"), evidence_set_hash([]), "", "sha256:00"]),
    st.text(max_size=80),
)
EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6)
"""Edits for ``mutate``: (op, position, byte) with op 0 overwrite, 1 truncate, 2 insert, 3 delete."""


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, position, byte in edits:
        if not buf:
            buf.append(byte)
            continue
        i = position % len(buf)
        if op == 0:
            buf[i] = byte
        elif op == 1:
            del buf[i:]
        elif op == 2:
            buf.insert(i, byte)
        else:
            del buf[i]
    return bytes(buf)


def seed_values(enc_sub: Callable[..., bytes], enc_close: Callable[[], bytes]) -> list[bytes]:
    """Valid records to start from, made by a test module's own encoders: a research stage, a coding stage
    with no pages on another run, a run close and a timed-out stage with three pages."""
    return [
        enc_sub(),
        enc_sub(run_id="run-2", stage_id="st", role="developer", kind="coding", pages=[]),
        enc_close(),
        enc_sub(pages=[b"a", b"b", b"c"], reason_code="budget_exhausted", terminal_state="timed_out"),
    ]


@st.composite
def hostile_submission(draw: st.DrawFn) -> bytes:
    """Schema-valid ActivitySubmissions with hostile field values (some of them consistent enough to be accepted)."""
    observations = draw(
        st.lists(
            st.fixed_dictionaries(
                {"kind": st.sampled_from(["page", "", "k" * 65, "\u3000"]), "ref": st.text(max_size=8), "content_hash": DIGESTS}
            ),
            max_size=4,
        )
    )
    artifact = draw(st.binary(max_size=16))
    consistent = draw(st.booleans())
    try:
        esh = evidence_set_hash(o["content_hash"] for o in observations)
    except Exception:
        esh = draw(DIGESTS)
    record: dict[str, Any] = {
        "submission_id": draw(st.text(max_size=10)),
        "run_id": draw(IDS),
        "stage_id": draw(IDS),
        "role": draw(IDS),
        "producer": {"id": draw(st.text(max_size=6)), "sdk": "fuzz"},
        "kind": draw(
            st.one_of(st.sampled_from(["coding", "research", "browser", "data", "ops", "", "poetry"]), st.text(max_size=70))
        ),
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact) if consistent else draw(DIGESTS),
        "evidence_set_hash": esh if consistent else draw(DIGESTS),
        "observations": observations,
        "terminal_state": draw(
            st.one_of(st.sampled_from(["completed", "refused", "failed", "timed_out", "", "done"]), st.text(max_size=70))
        ),
        "reason_code": draw(st.one_of(st.sampled_from(["ok", "", " ", "\x85"]), st.text(max_size=5))),
        "occurred_at_ms": draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    }
    return codec.encode(codec.ACTIVITY_SUBMISSION, record)


@st.composite
def hostile_action(draw: st.DrawFn, key_id: str) -> bytes:
    """Schema-valid computer-use actions with hostile values (anchors, lineage and indexes that do not line up).

    ``key_id``: the scheduler's signing key id, so that some lineages name the right key.
    """
    record: dict[str, Any] = {
        "submission_id": draw(st.text(max_size=10)),
        "run_id": draw(IDS),
        "session_id": draw(IDS),
        "action_index": draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        "producer": {"id": draw(st.text(max_size=6)), "sdk": "fuzz"},
        "prev_anchor": draw(DIGESTS),
        "screenshot_hash": draw(DIGESTS),
        "dom_digest": draw(DIGESTS),
        "observation_hash": draw(DIGESTS),
        "action": {
            "kind": draw(st.sampled_from(["navigate", "click", "type", "teleport", ""])),
            "target": draw(st.text(max_size=12)),
            "value_digest": draw(st.sampled_from(["", "hmac-sha256:" + "0" * 64, "x"])),
        },
        "anchor": draw(DIGESTS),
        "lineage": {
            "entry": draw(st.one_of(st.binary(max_size=40), st.just(b'{"content_hash":"sha256:00","parent_hashes":[]}'))),
            "hmac": draw(st.sampled_from(["", "hmac-sha256:" + "1" * 64])),
            "key_id": draw(st.sampled_from(["", key_id, sha256_digest(b"k")])),
            "signature": draw(st.binary(max_size=64)),
        },
        "occurred_at_ms": draw(st.integers(min_value=0, max_value=2**62)),
    }
    return codec.encode(codec.COMPUTER_USE_ACTION, record)


def record_values(
    seeds: Sequence[bytes], *, key_id: str, close: Callable[[str], bytes], extra: Sequence[bytes] = ()
) -> st.SearchStrategy[bytes | None]:
    """Every kind of value above; ``seeds`` are valid encoded records (to mutate, and whose fingerprints to reuse),
    ``close`` encodes a RunClose for a run id, ``extra`` are further valid values to draw from."""
    fingerprints = st.sampled_from([seed[len(codec.MAGIC) : codec.HEADER_SIZE] for seed in seeds])
    return st.one_of(
        st.none(),
        st.binary(max_size=200),
        st.builds(
            lambda fp, body: codec.MAGIC + fp + body, fingerprints | st.binary(min_size=8, max_size=8), st.binary(max_size=120)
        ),
        st.builds(mutate, st.sampled_from(list(seeds)), EDITS),
        st.sampled_from(list(seeds)),
        hostile_submission(),
        hostile_action(key_id),
        *([st.sampled_from(list(extra))] if extra else []),
        st.builds(close, IDS),
    )


def keyed(values: st.SearchStrategy[bytes | None]) -> st.SearchStrategy[list[tuple[bytes | None, bytes | None]]]:
    """1 to 25 (key, value) inputs; keys are mostly the seeds' run ids (a record must be keyed by its run id)."""
    keys = st.one_of(st.sampled_from([b"run-1", b"run-2"]), st.none(), st.binary(max_size=8))
    return st.lists(st.tuples(keys, values), min_size=1, max_size=25)
