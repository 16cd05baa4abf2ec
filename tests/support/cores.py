"""Builders for the two scheduler cores side by side: the unit manifest, submissions, closes, actions, ``Pair``.

``Pair`` feeds the same records to the Python reference (``SchedulerCore``) and to the native core
(``NativeSchedulerCore``) and asserts identical outputs and states; the differential suite
(``tests/unit/differential/test_native_core.py``) and the tests of one rule in both cores use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bernstein.consumers.core.model import InputRecord, Lifetime, OutputRecord, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import canonical, codec
from bernstein.schemas.canonical import canonical_json, computer_use_genesis, evidence_set_hash, hmac_key_id, sha256_digest
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.records import BROWSER_SESSION_FORMAT
from bernstein.substrate.keys import Ed25519Signer
from tests.support.producers import NAMES, encode_signed_close, producer, producer_signer, registry, signed_submission

TOPIC = "unit.activity.submissions"
PARTITION = 3
BASE_TS = 1_760_000_000_000
AUDIT_KEY = bytes(range(100, 132))
SEED = bytes(range(32))
SIGNER = Ed25519Signer.from_seed(SEED)
ROLES = {"developer": "coding", "scout": "research", "navigator": "browser", "operator": "ops", "analyst": "data"}
NON_ASCII_PRODUCERS = ("w\u00f6rker", "\u4e2d" * 256)
"""Producer names of the non-ASCII cases, registered like the others."""
PRODUCERS = registry(
    *(name for name in NAMES if name != "unit@test"),
    extra=[
        # unit@test also holds a grant for a role the manifest does not declare (UNKNOWN_ROLE stays reachable)
        producer("unit@test", roles=[*ROLES, "ghost"]),
        *(producer(name) for name in NON_ASCII_PRODUCERS),
        producer("retired@test", lifetime=Lifetime(0, BASE_TS)),
        producer("future@test", lifetime=Lifetime(BASE_TS + 1_000_000)),
        producer("scout@test", roles=["scout"], agent_kinds=[]),
        producer("sc\u00f6ut \u2603", roles=["scout"], agent_kinds=[]),
    ],
)


def make_config(seal_every: int = 1000, roles: Mapping[str, Any] | None = None, signer: Any = SIGNER) -> SchedulerConfig:
    return SchedulerConfig(
        roles=dict(ROLES if roles is None else roles),
        signer=signer,
        audit_key=AUDIT_KEY,
        audit_key_id=hmac_key_id(AUDIT_KEY),
        seal_every=seal_every,
        producers=PRODUCERS,
    )


def observations(pages: Iterable[bytes]) -> list[dict[str, Any]]:
    """The pages' observations with their sizes (submissions are published as ActivitySubmission.v2)."""
    return [
        {"kind": "page", "ref": f"https://example.test/{i}", "content_hash": sha256_digest(p), "size": len(p)}
        for i, p in enumerate(pages)
    ]


def sub(
    *,
    run_id: str = "run-1",
    stage_id: str = "stage-0",
    role: str = "developer",
    kind: str = "coding",
    pages: Iterable[bytes] = (b"page one", b"page two"),
    artifact: bytes = b'{"report":"two pages"}',
    **changes: Any,
) -> dict[str, Any]:
    """A valid ActivitySubmission record with ``changes`` applied last."""
    obs = observations(pages)
    record = {
        "submission_id": f"sub-{run_id}-{stage_id}",
        "run_id": run_id,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": "unit@test", "sdk": "bernstein-python/0.1.0"},
        "kind": kind,
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in obs),
        "observations": obs,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1_700_000_000_123,
    }
    record.update(changes)
    return record


def enc(record: dict[str, Any]) -> bytes:
    """An ActivitySubmission.v3 signed as its producer (an observation without a size declares 1 byte)."""
    sized = {**record, "observations": [{"size": 1, **o} for o in record["observations"]]}
    try:
        signed = signed_submission(sized)
    except CanonicalizationError:  # an out-of-range integer: no statement to sign (refused before it matters)
        key_id = producer_signer(record["producer"]["id"]).key_id
        signed = {**sized, "producer_key_id": key_id, "producer_signature": bytes(64)}
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed)


def enc_sub(**kwargs: Any) -> bytes:
    return enc(sub(**kwargs))


def close_record(run_id: str = "run-1", submission_id: str | None = None) -> dict[str, Any]:
    return {
        "submission_id": submission_id or f"close-{run_id}",
        "run_id": run_id,
        "producer": {"id": "unit@test", "sdk": "bernstein-python/0.1.0"},
        "occurred_at_ms": 1_700_000_000_999,
    }


def enc_close(run_id: str = "run-1", submission_id: str | None = None) -> bytes:
    """A RunClose.v2 signed as unit@test."""
    return encode_signed_close(close_record(run_id, submission_id))


def browser_artifact(run_id: str, stage_id: str, head: str | None = None, count: int = 0) -> bytes:
    return canonical_json(
        {
            "format": BROWSER_SESSION_FORMAT,
            "session_id": stage_id,
            "head_anchor": head or computer_use_genesis(run_id, stage_id),
            "action_count": count,
        }
    )


def _describe(outputs: list[OutputRecord]) -> list[Any]:
    described: list[tuple[Any, ...]] = []
    for o in outputs:
        try:
            decoded = codec.decode(o.value)
            record = dict(decoded.record)
            if "payload" in record:
                record["payload"] = codec.decode(record["payload"]).record
            described.append((o.stream.value, o.key, decoded.schema.name, record, o.headers, o.timestamp_ms))
        except Exception as exc:  # pragma: no cover - only for failure messages
            described.append((o.stream, o.key, f"undecodable: {exc}", o.value, o.headers, o.timestamp_ms))
    return described


def assert_same_outputs(got: list[OutputRecord], expected: list[OutputRecord]) -> None:
    assert all(type(o) is OutputRecord and type(o.stream) is Stream for o in got)
    if got != expected:
        assert _describe(got) == _describe(expected)
        assert [(o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in got] == [
            (o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in expected
        ]


class Pair:
    """Feeds every record to the Python reference and to the native core and compares them."""

    def __init__(self, config: SchedulerConfig | None = None, *, partition: int = PARTITION, self_check: bool = False) -> None:
        self.config = config or make_config()
        self.py = SchedulerCore(self.config)
        self.py_state = initial_state(self.config, partition)
        self.native = NativeSchedulerCore(self.config, partition, self_check=self_check)
        self.state: SchedulerState | NativeState = initial_state(self.config, partition)
        self.partition = partition
        self.offset = 0
        self.outputs: list[OutputRecord] = []

    def record(self, value: bytes | None, key: bytes | None = b"run-1", **fields: Any) -> InputRecord:
        offset = fields.pop("offset", self.offset)
        self.offset = offset + 1
        return InputRecord(
            topic=fields.pop("topic", TOPIC),
            partition=fields.pop("partition", self.partition),
            offset=offset,
            timestamp_ms=fields.pop("timestamp_ms", BASE_TS + 7 * offset),
            key=key,
            value=value,
        )

    def feed_record(self, record: InputRecord, *, check_state: bool = True) -> list[OutputRecord]:
        self.py_state, expected = self.py.step(self.py_state, record)
        self.state, got = self.native.step(self.state, record)
        assert_same_outputs(got, expected)
        self.outputs.extend(got)
        if check_state:
            self.check_state()
        else:
            assert self.native._native.audit_position() == (
                self.py_state.partition,
                self.py_state.audit_seq,
                self.py_state.audit_head,
            )
        return got

    def feed(
        self, value: bytes | None, key: bytes | None = b"run-1", *, check_state: bool = True, **fields: Any
    ) -> list[OutputRecord]:
        return self.feed_record(self.record(value, key, **fields), check_state=check_state)

    def check_state(self) -> None:
        assert self.native.to_scheduler_state() == self.py_state


def kinds(outputs: list[OutputRecord]) -> list[str]:
    return [codec.decode(o.value).schema.name for o in outputs]


UNIT = producer_signer("unit@test")
VALID = enc_sub()
NAVIGATOR = producer_signer("navigator@test")


def cu_action(
    run_id: str,
    session_id: str,
    index: int,
    prev_anchor: str,
    *,
    kind: str = "click",
    shot: bytes | None = None,
    sizes: tuple[int, int] | None = None,
    v1: bool = False,
) -> tuple[bytes, str]:
    """A ComputerUseAction the reference accepts after ``prev_anchor`` (signed by navigator@test's producer key).

    A v2 action declaring ``sizes`` (screenshot_size, dom_size; default the real sizes of the
    screenshot and of ``dom <index>``), or with ``v1`` a ComputerUseAction.v1, which declares none
    (refused unless the scheduler accepts undeclared sizes). ``shot`` is the screenshot's bytes
    (default ``screenshot <index>``).
    """
    screenshot_bytes = shot if shot is not None else b"screenshot %d" % index
    dom = sha256_digest(b"dom %d" % index)
    observation = canonical.observation_hash(screenshot_bytes, dom)
    action = {"kind": kind, "target": f"#button-{index}", "value_digest": ""}
    anchor = canonical.action_anchor(prev_anchor, observation, action)
    entry = canonical_json(
        {
            "run_id": run_id,
            "session_id": session_id,
            "action_index": index,
            "content_hash": anchor,
            "parent_hashes": [prev_anchor],
            "worker_id": "navigator@test",
            "key_id": NAVIGATOR.key_id,
        }
    )
    record: dict[str, Any] = {
        "submission_id": f"{session_id}-{index}",
        "run_id": run_id,
        "session_id": session_id,
        "action_index": index,
        "producer": {"id": "navigator@test", "sdk": "unit"},
        "prev_anchor": prev_anchor,
        "screenshot_hash": sha256_digest(screenshot_bytes),
        "dom_digest": dom,
        "observation_hash": observation,
        "action": action,
        "anchor": anchor,
        "lineage": {
            "entry": entry,
            "hmac": canonical.lineage_hmac(AUDIT_KEY, entry),
            "key_id": NAVIGATOR.key_id,
            "signature": NAVIGATOR.sign(canonical.lineage_signing_input(entry)),
        },
        "occurred_at_ms": 1_700_000_000_500 + index,
    }
    if v1:
        return codec.encode(codec.COMPUTER_USE_ACTION, record), anchor
    record["screenshot_size"], record["dom_size"] = sizes or (len(screenshot_bytes), len(b"dom %d" % index))
    return codec.encode(codec.COMPUTER_USE_ACTION_V2, record), anchor


def mixed_inputs() -> list[tuple[bytes | None, bytes | None]]:
    inputs: list[tuple[bytes | None, bytes | None]] = []
    for i in range(12):
        run_id = ("run-a", "run-b", "run-c")[i % 3]
        inputs.append((run_id.encode(), enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode(), b"shared"])))
    inputs += [
        (b"run-a", enc_sub(run_id="run-a", stage_id="again", pages=[b"shared", b"p0"])),
        (b"run-b", enc_sub(run_id="run-b", stage_id="s1", pages=[b"fresh"], submission_id="again")),
        (b"run-a", enc_sub(run_id="run-a", stage_id="s0", pages=[b"p0", b"shared"])),  # a repeated submission_id
        (b"run-a", enc_sub(run_id="run-a", stage_id="x", role="ghost")),
        (b"run-a", b"\x00garbage"),
        (None, None),
        (b"run-b", enc_close("run-b")),
        (b"run-b", enc_sub(run_id="run-b", stage_id="late", pages=[b"late"])),
        (b"run-a", VALID[:-3]),
        (b"run-c", enc_sub(run_id="run-c", stage_id="empty-1", pages=[])),
        (b"run-a", enc_close("run-a")),
        (b"run-a", enc_close("run-a")),
        (
            b"run-d",
            enc_sub(run_id="run-d", stage_id="b0", role="navigator", kind="browser", artifact=browser_artifact("run-d", "b0")),
        ),
    ]
    for i in range(12, 20):
        inputs.append((b"run-c", enc_sub(run_id="run-c", stage_id=f"s{i}", pages=[f"p{i}".encode()])))
    return inputs


def encode_v3(record: dict[str, Any], **fields: Any) -> bytes:
    """``record`` signed as its producer, then ``fields`` set over the signed record (a signature, a key id)."""
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, {**signed_submission(record), **fields})


TRUNCATED: dict[str, bytes] = {
    "truncated-tail": VALID[:-7],
    "truncated-early": VALID[: codec.HEADER_SIZE + 3],
    "header-only": codec.default_codec().schema(codec.RUN_CLOSE).header,
    "submission-header-only": codec.default_codec().schema(codec.ACTIVITY_SUBMISSION).header,
    "invalid-utf8": VALID.replace(b"run-1", b"run\xff1", 1),
    "surrogate-utf8": VALID.replace(b"run-1", b"r\xed\xa0\x80", 1),
    "negative-length": VALID[: codec.HEADER_SIZE] + b"\x01" + VALID[codec.HEADER_SIZE + 1 :],
    "huge-length": VALID[: codec.HEADER_SIZE] + b"\xfe\xff\xff\xff\x0f" + VALID[codec.HEADER_SIZE + 1 :],
    "overlong-varint": VALID[: codec.HEADER_SIZE] + b"\xff" * 11 + b"\x01" + VALID[codec.HEADER_SIZE + 1 :],
}
"""Malformed bodies of a valid submission (``VALID``): the native core hands each to the reference."""
