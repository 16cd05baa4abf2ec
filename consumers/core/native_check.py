"""The native core's startup self-check: a few records of every kind through it and the Python reference.

``NativeSchedulerCore`` runs ``_self_check`` when it is made (unless told not to): any difference in
outputs or state raises ``NativeUnavailable``, and ``make_core``'s ``auto`` then runs the reference. A
module of its own because it builds its own probe inputs and keys, apart from the adapter
(``bernstein.consumers.core.native``), which imports it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bernstein.consumers.core import step as _reference
from bernstein.consumers.core.model import (
    InputRecord,
    Lifetime,
    Producer,
    ProducerKey,
    ProducerRegistry,
    SchedulerState,
)
from bernstein.consumers.core.step import SchedulerCore
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    evidence_set_hash,
    public_key_id,
    run_close_statement,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.records import KINDS

if TYPE_CHECKING:
    from bernstein.consumers.core.native import NativeSchedulerCore, NativeState


_PROBE_PRODUCER = "bernstein-native-self-check"
_PROBE_SEED = hashlib.sha256(b"bernstein/native-self-check/v1").digest()


def _sign_probe(statement: dict[str, Any]) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(_PROBE_SEED).sign(submission_signing_input(statement))


def _self_check(core: NativeSchedulerCore) -> None:
    """A few records of every kind through both cores; any difference disables the native one.

    They run on a probe pair of cores whose configuration is ``core``'s plus one producer the check
    can sign for (a deterministic key of its own), so the signed path is compared too.
    """
    from bernstein.consumers.core.native import NativeSchedulerCore, NativeUnavailable  # native imports this module

    config = core.config
    role_kind = next(
        ((r, k) for r, k in sorted(config.roles.items()) if isinstance(k, str) and k in KINDS and k != "browser"), None
    )
    probe_public = Ed25519PrivateKey.from_private_bytes(_PROBE_SEED).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = public_key_id(probe_public)
    granted = frozenset({role_kind[0]} if role_kind else ())
    probe_producer = Producer(_PROBE_PRODUCER, granted, frozenset(), (ProducerKey(key_id, probe_public, Lifetime(0, 1_005)),))
    others = [
        p for p in config.producers.producers.values() if p.name != _PROBE_PRODUCER and key_id not in {k.key_id for k in p.keys}
    ]
    probe_config = dataclasses.replace(config, producers=ProducerRegistry.of([*others, probe_producer]))
    native = NativeSchedulerCore(probe_config, core.partition, self_check=False)
    reference = SchedulerCore(probe_config)
    digests = [sha256_digest(b"%d" % i) for i in range(2)]
    observations: list[dict[str, Any]] = [
        {"kind": "page", "ref": f"self-check/{i}", "content_hash": digest, "size": 1} for i, digest in enumerate(digests)
    ]
    artifact = b'{"self":"check"}'
    base = {
        "submission_id": "self-check-0",
        "run_id": "self-check-run",
        "stage_id": "stage-0",
        "role": role_kind[0] if role_kind else "self-check-role",
        "producer": {"id": _PROBE_PRODUCER, "sdk": "bernstein-native"},
        "kind": role_kind[1] if role_kind else "coding",
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(digests),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1,
    }

    def signed(record: dict[str, Any], *, signature: bytes | None = None) -> bytes:
        sig = _sign_probe(submission_statement(record, key_id)) if signature is None else signature
        return codec.encode(codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_key_id": key_id, "producer_signature": sig})

    close = {"submission_id": "c", "run_id": "self-check-run", "producer": base["producer"], "occurred_at_ms": 2}
    valid = signed(base)
    values: list[bytes | None] = [
        valid,
        valid,  # duplicate stage (or unknown role when the manifest has no usable role)
        signed({**base, "stage_id": "stage-1", "kind": "po\u00e9try \u2603", "role": "x"}),
        signed({**base, "stage_id": "stage-2", "reason_code": "ok\n"}),
        signed({**base, "stage_id": "stage-3"}, signature=bytes(64)),
        codec.encode(codec.ACTIVITY_SUBMISSION_V2, {**base, "stage_id": "stage-4"}),
        valid[:-5],
        valid + b"\x00",
        b"not avro",
        codec.MAGIC + b"\x00" * 8 + b"body",
        codec.encode(codec.RUN_CLOSE, close),
        codec.encode(
            codec.RUN_CLOSE_V2,
            {
                **close,
                "producer_key_id": key_id,
                "producer_signature": _sign_probe(run_close_statement("c", "self-check-run", _PROBE_PRODUCER, 2, key_id)),
            },
        ),
        signed({**base, "stage_id": "stage-5"}),  # after the key's range: PRODUCER_KEY_NOT_VALID
        None,
    ]
    keys = [b"self-check-run"] * len(values)
    keys[1] = b"k"  # the duplicate is refused for its key (RUN_KEY_MISMATCH)
    records = [InputRecord("self-check", 0, i, 1_000 + i, key, v) for i, (key, v) in enumerate(zip(keys, values, strict=True))]
    py_state = _reference.initial_state(probe_config, core.partition)
    state: SchedulerState | NativeState = _reference.initial_state(probe_config, core.partition)
    for record in records:
        py_state, expected = reference.step(py_state, record)
        state, got = native.step(state, record)
        if got != expected or native.to_scheduler_state() != py_state:
            raise NativeUnavailable(
                f"the native core's outputs differ from the Python reference's (self-check record {record.offset}): "
                "bernstein_native needs updating for this tree"
            )
