"""tlog.json: RFC 6962 trees, proofs and C2SP signed checkpoints made by our code, for other implementations to check.

    python -m tests.vectors.generate          # writes it with the other files (FILES["tlog.json"])

Everything here comes from ``bernstein.schemas.merkle`` (leaf and node hashes, roots, inclusion and
consistency proofs) and ``bernstein.schemas.notes`` (checkpoint bodies, Ed25519 signed notes,
cosignature/v1): the Go SDK's conformance runner (built on ``golang.org/x/mod/sumdb/note``,
``github.com/transparency-dev/merkle`` and ``github.com/transparency-dev/formats``) and the TypeScript
SDK's accept every case under ``accepted`` and refuse every case under ``refused``; each refused case is an accepted one with one thing changed, named in its ``why``.
The leaves are test bytes, not the journal's leaf encodings, and the origin an example's: what the
vectors pin is the tree and note arithmetic, which the scheduler's log uses unchanged.

Two sections pin the scheduler's log itself (``journal_sections``): ``scheduler_checkpoints``, a small
run journalled by the reference core (``bernstein.consumers.core.step``, steps.json's fixed keys) with
its journal partition's records, every PartitionCheckpoint.v2 it signed and notes that must be
refused; and ``activity_proofs``, C2SP tlog-proofs of stages of that run made by
``bernstein.verifier.proof.prove`` and held to ``verify_proof`` here, with one-thing-changed variants
and the problem codes ``verify_proof`` gives them. The runners recompute every leaf from the records
with their own codec, and the Go one checks the notes, trees and proofs with the libraries above.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from typing import Any

from bernstein.schemas import canonical, codec, merkle, notes

LEAF_COUNT = 13
CHECKPOINT_SIZES = (1, 2, 7, 8, 13)
INCLUSION = [(0, 1), (0, 2), (1, 2), (0, 7), (3, 7), (6, 7), (0, 8), (5, 8), (7, 8), (0, 13), (4, 13), (8, 13), (12, 13)]
CONSISTENCY = [(1, 2), (1, 8), (2, 7), (3, 7), (4, 8), (6, 8), (7, 8), (1, 13), (5, 13), (7, 13), (8, 13), (12, 13), (13, 13)]
ORIGIN = "bernstein.example/vectors/journal/0"
LOG_NAME = ORIGIN
WITNESS_NAME = "witness.bernstein.example"
COSIGNED_AT = 1767225600
"""The witness's cosignature timestamp (seconds), stated: never the clock."""


def _seed(label: str) -> bytes:
    return hashlib.sha256(f"bernstein tlog vectors: {label}".encode()).digest()


def _flip(data: bytes, position: int) -> bytes:
    flipped = bytearray(data)
    flipped[position] ^= 0x01
    return bytes(flipped)


def tlog_vectors() -> dict[str, Any]:
    log = notes.NoteSigner(LOG_NAME, notes.SIG_ED25519, _seed("log key"))
    witness = notes.NoteSigner(WITNESS_NAME, notes.SIG_COSIGNATURE_V1, _seed("witness key"))
    stranger = notes.NoteSigner(LOG_NAME, notes.SIG_ED25519, _seed("another key with the log's name"))
    leaves = [f"leaf {i}".encode() for i in range(LEAF_COUNT)]
    hashes = [merkle.leaf_hash(leaf) for leaf in leaves]
    roots = {size: merkle.root(hashes[:size]) for size in range(LEAF_COUNT + 1)}

    checkpoints = []
    for size in CHECKPOINT_SIZES:
        body = notes.Checkpoint(ORIGIN, size, roots[size]).body()
        signed = notes.sign_note(body, [log])
        cosigned = notes.add_signatures(signed, [witness.sign(body, timestamp=COSIGNED_AT)])
        checkpoints.append(
            {
                "size": size,
                "root_hex": roots[size].hex(),
                "body": body.decode(),
                "note": signed.decode(),
                "cosigned": cosigned.decode(),
            }
        )
    inclusion = [
        {
            "index": index,
            "size": size,
            "leaf_hash_hex": hashes[index].hex(),
            "root_hex": roots[size].hex(),
            "proof_hex": [h.hex() for h in merkle.inclusion_proof(hashes[:size], index)],
        }
        for index, size in INCLUSION
    ]
    consistency = [
        {
            "size1": size1,
            "size2": size2,
            "root1_hex": roots[size1].hex(),
            "root2_hex": roots[size2].hex(),
            "proof_hex": [h.hex() for h in merkle.consistency_proof(hashes[:size2], size1)],
        }
        for size1, size2 in CONSISTENCY
    ]
    assert all(_inclusion_holds(case) for case in inclusion) and all(_consistency_holds(case) for case in consistency)

    last = checkpoints[-1]
    body = last["body"].encode()
    refused_notes = [
        {"why": "one bit of the log's signature line flipped", "note": _flip(last["note"].encode(), -10).decode()},
        {"why": "the tree size changed under the log's signature", "note": last["note"].replace("\n13\n", "\n14\n", 1)},
        {"why": "signed by another key under the log's name", "note": notes.sign_note(body, [stranger]).decode()},
    ]
    refused_cosigned = [
        {
            "why": "the cosignature's timestamp changed",
            "note": notes.add_signatures(
                last["note"].encode(),
                [
                    notes.Signature(
                        WITNESS_NAME,
                        witness.key_id,
                        (COSIGNED_AT + 1).to_bytes(8, "big") + witness.sign(body, timestamp=COSIGNED_AT).signature[8:],
                    )
                ],
            ).decode(),
        },
    ]
    mid = inclusion[10]
    refused_inclusion = [
        {
            **mid,
            "why": "one bit of a proof hash flipped",
            "proof_hex": [_flip(bytes.fromhex(mid["proof_hex"][0]), 0).hex(), *mid["proof_hex"][1:]],
        },
        {**mid, "why": "the leaf index moved by one", "index": mid["index"] + 1},
        {**inclusion[12], "why": "the tree size grown by one", "size": inclusion[12]["size"] + 1},
        {**mid, "why": "a proof hash dropped", "proof_hex": mid["proof_hex"][:-1]},
    ]
    cons = consistency[9]
    refused_consistency = [
        {
            **cons,
            "why": "one bit of a proof hash flipped",
            "proof_hex": [_flip(bytes.fromhex(cons["proof_hex"][0]), 31).hex(), *cons["proof_hex"][1:]],
        },
        {**cons, "why": "the old root is another tree's", "root1_hex": roots[cons["size1"] - 1].hex()},
        {**cons, "why": "the old size moved by one", "size1": cons["size1"] + 1},
    ]
    for case in refused_inclusion:
        assert not _inclusion_holds(case), case["why"]
    for case in refused_consistency:
        assert not _consistency_holds(case), case["why"]
    return {
        "description": (
            "RFC 6962 / 9162 Merkle trees and C2SP signed checkpoints made by bernstein.schemas.merkle and "
            "bernstein.schemas.notes (tests/vectors/tlog_vectors.py), for other implementations to check: "
            "leaf_hash = SHA-256(0x00 || leaf), node = SHA-256(0x01 || left || right); roots[size] of the first size "
            "leaves; checkpoints in the tlog-checkpoint format signed by the log key (note) and also cosigned by "
            "the witness key (cosigned: cosignature/v1 at the stated timestamp); inclusion and consistency proofs "
            "as RFC 9162 defines them. Every accepted case verifies; every refused case is an accepted one with one "
            "thing changed (why) and does not. The Go SDK's conformance runner checks them with the "
            "transparency-dev and sumdb note libraries, the TypeScript SDK's with its own code (make test)."
        ),
        "log": {"name": LOG_NAME, "vkey": log.verifier.vkey, "ed25519_seed_hex": log.seed.hex()},
        "witness": {"name": WITNESS_NAME, "vkey": witness.verifier.vkey, "ed25519_seed_hex": witness.seed.hex()},
        "origin": ORIGIN,
        "cosigned_at": COSIGNED_AT,
        "leaves_hex": [leaf.hex() for leaf in leaves],
        "leaf_hashes_hex": [h.hex() for h in hashes],
        "roots_hex": [roots[size].hex() for size in range(LEAF_COUNT + 1)],
        "accepted": {"checkpoints": checkpoints, "inclusion": inclusion, "consistency": consistency},
        "refused": {
            "notes": refused_notes,
            "cosigned": refused_cosigned,
            "inclusion": refused_inclusion,
            "consistency": refused_consistency,
        },
        **journal_sections(),
    }


def _inclusion_holds(case: dict[str, Any]) -> bool:
    try:
        return merkle.verify_inclusion(
            bytes.fromhex(case["leaf_hash_hex"]),
            case["index"],
            case["size"],
            [bytes.fromhex(h) for h in case["proof_hex"]],
            bytes.fromhex(case["root_hex"]),
        )
    except merkle.MalformedProof:
        return False


def _consistency_holds(case: dict[str, Any]) -> bool:
    try:
        return merkle.verify_consistency(
            case["size1"],
            case["size2"],
            bytes.fromhex(case["root1_hex"]),
            bytes.fromhex(case["root2_hex"]),
            [bytes.fromhex(h) for h in case["proof_hex"]],
        )
    except merkle.MalformedProof:
        return False


# -- the scheduler's own log: its signed checkpoints and proofs of one activity ----------------------------

JOURNAL_LOG_NAME = "bernstein.example/vectors"
JOURNAL_EPOCH = 1
JOURNAL_SEAL_EVERY = 2
JOURNAL_CHECKPOINT_EVERY = 4
PROVED = (("run-1", "stage-0", 1), ("run-2", "stage-0", 2), ("run-1", "stage-3", 3))
"""(run, stage, checkpoints written by then): each stage proved under the newest checkpoint of that moment."""


def _observed(name: str) -> list[dict[str, Any]]:
    data = f"page {name}".encode()
    return [
        {"kind": "page", "ref": f"https://example.test/{name}", "content_hash": canonical.content_hash(data), "size": len(data)}
    ]


def _journalled_run() -> tuple[Any, list[Any]]:
    """The scheduler config and every output of a small run journalled by the reference core (steps.json's keys)."""
    from bernstein.consumers.core.model import InputRecord
    from bernstein.consumers.core.step import SchedulerCore, initial_state
    from tests.vectors import step_vectors as steps

    config = dataclasses.replace(
        steps.scheduler_config(),
        seal_every=JOURNAL_SEAL_EVERY,
        checkpoint_every=JOURNAL_CHECKPOINT_EVERY,
        log_name=JOURNAL_LOG_NAME,
        log_epoch=JOURNAL_EPOCH,
    )
    inputs = [
        steps.stage(run_id="run-1", stage_id="stage-0", observations=_observed("a")),
        steps.stage(run_id="run-2", stage_id="stage-0", observations=_observed("b")),
        steps.stage(run_id="run-1", stage_id="stage-1", observations=_observed("c")),
        steps.stage(run_id="run-1", stage_id="stage-2", observations=_observed("d")),
        steps.close("run-2"),
        steps.stage(run_id="run-1", stage_id="stage-3", observations=_observed("e")),
        steps.close("run-1"),
    ]
    core = SchedulerCore(config)
    state = initial_state(config, 0)
    outputs: list[Any] = []
    for offset, item in enumerate(inputs):
        assert item.value is not None
        state, out = core.step(state, InputRecord(steps.TOPIC, 0, offset, steps.BASE_TS + offset, item.key, item.value))
        outputs += out
    return config, outputs


def _source(outputs: list[Any], checkpoints: int) -> Any:
    """The run's journal and its first ``checkpoints`` checkpoints, as an in-memory source (partition 0)."""
    from bernstein.verifier.memory_source import MemorySource
    from bernstein.verifier.sources import StoredRecord

    source = MemorySource()
    written = {"journal": 0, "checkpoints": 0}
    for out in outputs:
        stream = out.stream.value
        if stream not in written or (stream == "checkpoints" and written[stream] == checkpoints):
            continue
        source.add(
            StoredRecord(stream, f"vectors.{stream}", 0, written[stream], out.timestamp_ms, out.key, out.value, out.headers)
        )
        written[stream] += 1
    return source


def _tree_refusal(note: str, verifier: notes.NoteVerifier, hashes: list[bytes]) -> str | None:
    """``signature`` when the note does not open with the seal key's verifier for its origin, ``tree`` when it
    names another tree head than the journal's first ``size`` leaves give, None when it is accepted."""
    try:
        checkpoint, _ = notes.open_checkpoint(note.encode(), (verifier,))
    except notes.NoteRejected:
        return "signature"
    size = checkpoint.size
    return None if size <= len(hashes) and merkle.root(hashes[:size]) == checkpoint.root_hash else "tree"


def _scheduler_checkpoints(config: Any, outputs: list[Any]) -> tuple[dict[str, Any], str]:
    from bernstein.verifier.tlog import journal_leaf
    from tests.vectors import step_vectors as steps

    c = codec.default_codec()
    origin = canonical.tlog_origin(JOURNAL_LOG_NAME, steps.TOPIC, 0, JOURNAL_EPOCH)
    seal = notes.NoteSigner(origin, notes.SIG_ED25519, steps.SEAL_SEED)
    assert seal.public_key == config.signer.public_key_raw
    journal, hashes = [], []
    for out in outputs:
        if out.stream.value != "journal":
            continue
        leaf = journal_leaf(c, out.value)
        assert leaf is not None
        hashes.append(merkle.leaf_hash(leaf))
        journal.append(
            {"schema": codec.decode(out.value).schema.name, "value_hex": out.value.hex(), "leaf_hash_hex": hashes[-1].hex()}
        )
    checkpoints = []
    for out in outputs:
        if out.stream.value != "checkpoints":
            continue
        record = codec.decode(codec.decode(out.value).record["payload"]).record
        size, note = record["tree_size"], record["note"]
        assert record["tree_root"] == canonical.DIGEST_PREFIX + merkle.root(hashes[:size]).hex()
        assert note == notes.sign_note(notes.Checkpoint(origin, size, merkle.root(hashes[:size])).body(), [seal]).decode()
        checkpoints.append(
            {
                "seq": record["seq"],
                "reason": record["reason"],
                "tree_size": size,
                "tree_root": record["tree_root"],
                "note": note,
                "value_hex": out.value.hex(),
            }
        )
    assert [cp["tree_size"] for cp in checkpoints] == [4, 6, 9], [cp["tree_size"] for cp in checkpoints]

    mid = checkpoints[1]
    size = mid["tree_size"]
    swapped = [*hashes[:4], hashes[5], hashes[4]]
    stranger = notes.NoteSigner(origin, notes.SIG_ED25519, _seed("another key under the journal log's origin"))
    other_origin = canonical.tlog_origin(JOURNAL_LOG_NAME, steps.TOPIC, 1, JOURNAL_EPOCH)
    other = notes.NoteSigner(other_origin, notes.SIG_ED25519, steps.SEAL_SEED)

    def signed(signer: notes.NoteSigner, size: int, root: bytes) -> str:
        return notes.sign_note(notes.Checkpoint(signer.name, size, root).body(), [signer]).decode()

    refused = [
        {
            "why": "the tree size in the note's body edited (the seal key's signature kept)",
            "refused_for": "signature",
            "note": mid["note"].replace(f"\n{size}\n", f"\n{size + 1}\n", 1),
        },
        {
            "why": "the same tree head signed by another key under the log's origin",
            "refused_for": "signature",
            "note": notes.sign_note(notes.Checkpoint(origin, size, merkle.root(hashes[:size])).body(), [stranger]).decode(),
        },
        {
            "why": "the same tree head signed by the seal key as partition 1's log",
            "refused_for": "signature",
            "note": signed(other, size, merkle.root(hashes[:size])),
        },
        {
            "why": "signed by the seal key, but the root of the journal's leaves 4 and 5 swapped",
            "refused_for": "tree",
            "note": signed(seal, size, merkle.root(swapped)),
        },
        {
            "why": "signed by the seal key, but one leaf more than the journal holds",
            "refused_for": "tree",
            "note": signed(seal, len(hashes) + 1, merkle.root([*hashes, hashes[-1]])),
        },
    ]
    for cp in checkpoints:
        assert _tree_refusal(cp["note"], seal.verifier, hashes) is None
    for case in refused:
        assert _tree_refusal(case["note"], seal.verifier, hashes) == case["refused_for"], case["why"]
    section = {
        "about": (
            "A run journalled by the reference scheduler core (steps.json's manifest and seal key; seal_every "
            f"{JOURNAL_SEAL_EVERY}, checkpoint_every {JOURNAL_CHECKPOINT_EVERY}, log name {JOURNAL_LOG_NAME!r}, epoch "
            f"{JOURNAL_EPOCH}; inputs on {steps.TOPIC} partition 0): journal lists the journal partition's records in order "
            "(JournalRecord or SealRecord bytes), each a leaf of the partition's RFC 6962 log: "
            "PAE('bernstein/tlog-leaf/v1', JCS(['entry', run_id, seq, journal_entry_hash(payload)])) for an entry, "
            "JCS(['seal', run_id, entry_count, head_hash, last_input_offset, final, audit_head]) of the RunSeal for a "
            "seal; leaf_hash_hex = SHA-256(0x00 || leaf). checkpoints lists every CheckpointRecord the run wrote "
            "(signed over PAE('bernstein/partition-checkpoint/v1', payload) by the seal key); each PartitionCheckpoint.v2 "
            "names tree_size and tree_root of the journal's first tree_size leaves and carries them as note, a C2SP "
            "signed tlog-checkpoint under origin '<log name>/<input_topic>/<partition>/e<epoch>' signed by the seal key "
            "(vkey). Every refused note is refused: for its signature (it does not open with vkey), or for the tree "
            "(it opens, but names a size and root the journal's leaves do not give)."
        ),
        "log_name": JOURNAL_LOG_NAME,
        "epoch": JOURNAL_EPOCH,
        "input_topic": steps.TOPIC,
        "partition": 0,
        "origin": origin,
        "seal_key": {"public_key_hex": seal.public_key.hex(), "key_id": config.signer.key_id, "vkey": seal.verifier.vkey},
        "journal": journal,
        "checkpoints": checkpoints,
        "refused": refused,
    }
    return section, origin


def _activity_proofs(outputs: list[Any], origin: str) -> dict[str, Any]:
    from bernstein.substrate.keys import KeyPurpose, TrustedKey, TrustedKeys
    from bernstein.verifier.proof import prove, verify_proof
    from bernstein.verifier.proof_format import parse_proof
    from tests.vectors import step_vectors as steps

    seal = notes.NoteSigner(origin, notes.SIG_ED25519, steps.SEAL_SEED)
    seal_id = canonical.public_key_id(seal.public_key)
    producer = steps.KEYS[steps.WORKER]
    trusted = TrustedKeys.of(
        [
            TrustedKey(seal_id, KeyPurpose.SEAL, seal.public_key),
            TrustedKey(producer.key_id, KeyPurpose.PRODUCER, producer.public_key_raw, producer=steps.WORKER),
        ]
    )

    def problems(text: str) -> list[str]:
        return sorted(p.code for p in verify_proof(text.encode(), trusted).problems)

    accepted: list[dict[str, Any]] = []
    for run_id, stage_id, checkpoints in PROVED:
        text = prove(_source(outputs, checkpoints), run_id, stage_id).encode()
        report = verify_proof(text.encode(), trusted)
        assert not report.problems, report.problems
        accepted.append(
            {
                "run_id": run_id,
                "stage_id": stage_id,
                "index": report.index,
                "tree_size": report.tree_size,
                "root": report.root,
                "entry_hash": report.entry_hash,
                "proof": text,
            }
        )
    last = accepted[-1]
    base = parse_proof(last["proof"].encode())
    body, _, _ = base.note.decode().partition("\n\n")
    checkpoint = notes.parse_checkpoint(body + "\n")
    stage_at = base.record.index(last["stage_id"].encode())
    other_hex = b"0" if base.record[-1:] != b"0" else b"1"
    seal_value = next(
        o.value for o in outputs if o.stream.value == "journal" and codec.decode(o.value).schema.name == codec.SEAL_RECORD
    )
    stranger = notes.NoteSigner(origin, notes.SIG_ED25519, _seed("a key nobody pinned"))
    elsewhere = notes.NoteSigner(f"{JOURNAL_LOG_NAME}/another.topic/0/e{JOURNAL_EPOCH}", notes.SIG_ED25519, steps.SEAL_SEED)
    wrong_root = base64.b64encode(merkle.root([bytes(32)])).decode()

    def changed(**fields: Any) -> str:
        return dataclasses.replace(base, **fields).encode()

    def resigned(signer: notes.NoteSigner) -> bytes:
        return notes.sign_note(notes.Checkpoint(signer.name, checkpoint.size, checkpoint.root_hash).body(), [signer])

    lines = last["proof"].split("\n")
    variants = [
        (
            "one bit of a path hash flipped",
            changed(path=(base.path[0], _flip(base.path[1], 0), *base.path[2:])),
            ["PROOF_INCLUSION_FAILED"],
        ),
        ("the leaf index moved by one", changed(index=base.index + 1), ["PROOF_INCLUSION_FAILED"]),
        ("the last path hash dropped", changed(path=base.path[:-1]), ["PROOF_INCLUSION_FAILED"]),
        (
            "the root in the note's body changed (the seal key's signature kept)",
            changed(note=base.note.replace(base64.b64encode(checkpoint.root_hash), wrong_root.encode(), 1)),
            ["PROOF_CHECKPOINT_NOT_SIGNED"],
        ),
        ("the tree head signed by a key that is not pinned", changed(note=resigned(stranger)), ["PROOF_CHECKPOINT_NOT_SIGNED"]),
        (
            "the tree head signed by the seal key as another topic's log",
            changed(note=resigned(elsewhere)),
            ["PROOF_ORIGIN_MISMATCH"],
        ),
        (
            "one bit of the extra record's stage id flipped",
            changed(record=_flip(base.record, stage_at)),
            ["PROOF_ENTRY_HASH_MISMATCH", "PROOF_INCLUSION_FAILED", "PROOF_PRODUCER_SIGNATURE_INVALID"],
        ),
        (
            "the extra record's stored entry_hash changed",
            changed(record=base.record[:-1] + other_hex),
            ["PROOF_ENTRY_HASH_MISMATCH"],
        ),
        ("the extra data is the run's seal record, not an entry", changed(record=seal_value), ["PROOF_ENTRY_UNDECODABLE"]),
        (
            "the index written with a leading zero",
            "\n".join([*lines[:2], "index 0" + lines[2][6:], *lines[3:]]),
            ["PROOF_MALFORMED"],
        ),
        (
            "a path hash without its base64 padding",
            "\n".join([*lines[:3], lines[3].rstrip("="), *lines[4:]]),
            ["PROOF_MALFORMED"],
        ),
    ]
    refused = []
    for why, text, expected in variants:
        assert text != last["proof"] and problems(text) == expected, (why, problems(text))
        refused.append({"why": why, "proof": text, "problems": expected})
    return {
        "about": (
            "C2SP tlog-proofs (c2sp.org/tlog-proof@v1) of stages of scheduler_checkpoints' run, written by "
            "bernstein.verifier.proof.prove under the newest checkpoint at the time: 'extra' the stage's JournalRecord "
            "bytes (base64), 'index' its leaf index, the inclusion path (base64 hashes), an empty line, the signed "
            "checkpoint note. Each accepted proof verifies with the pinned keys alone (verify_proof: no problems): the "
            "note signed by the pinned seal key under its origin, the origin '<log name>/<entry's input topic>/<entry's "
            "input partition>/e<epoch>', the JournalRecord's payload a JournalEntry whose recomputed entry hash is the "
            "stored one, the leaf of (run_id, seq, entry hash) and the path hashing to the note's root, the stage's "
            "producer signature by a pinned key of its producer. Each refused proof is the last accepted one with one "
            "thing changed (why); problems are the sorted codes verify_proof gives it: PROOF_MALFORMED (not a strict "
            "tlog-proof: canonical base64, 'index' in decimal without leading zeros, 32-byte hashes), "
            "PROOF_ENTRY_UNDECODABLE, PROOF_CHECKPOINT_NOT_SIGNED, PROOF_ENTRY_HASH_MISMATCH, PROOF_ORIGIN_MISMATCH, "
            "PROOF_INCLUSION_FAILED, PROOF_PRODUCER_SIGNATURE_INVALID."
        ),
        "pinned": {
            "seal": {"public_key_hex": seal.public_key.hex(), "key_id": seal_id},
            "producers": [{"producer": steps.WORKER, "public_key_hex": producer.public_key_raw.hex(), "key_id": producer.key_id}],
        },
        "accepted": accepted,
        "refused": refused,
    }


def journal_sections() -> dict[str, Any]:
    """``scheduler_checkpoints`` and ``activity_proofs``: the scheduler's own log, from one run of the reference core."""
    config, outputs = _journalled_run()
    checkpoints, origin = _scheduler_checkpoints(config, outputs)
    return {"scheduler_checkpoints": checkpoints, "activity_proofs": _activity_proofs(outputs, origin)}
