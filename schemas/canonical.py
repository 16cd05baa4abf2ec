"""Every byte string this project hashes, MACs or signs is produced here.

One rule everywhere: structured documents are RFC 8785 (JCS) canonical JSON,
digests are ``sha256:<64 lowercase hex>``, and every chain step, MAC and
signature covers the exact stored bytes wrapped in a DSSE pre-authentication
encoding (PAE) whose type string names the domain. Nothing here performs I/O,
reads a clock or draws randomness: the same inputs give the same bytes in
every language, which ``schemas/vectors/`` pins down.

Why PAE: ``DSSEv1 <len(type)> <type> <len(body)> <body>`` is unambiguous (no
two (type, body) pairs share an encoding) and already implemented in every
language that speaks DSSE, so other SDKs need no bespoke framing.
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson
import rfc8785

from bernstein.schemas.errors import CanonicalizationError, MalformedDigest

CANONICALIZATION: Final = "rfc8785"
"""Tag written next to canonical documents so a future rule can be told apart."""

DIGEST_PREFIX: Final = "sha256:"
MAC_PREFIX: Final = "hmac-sha256:"
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_MAC_RE: Final = re.compile(r"hmac-sha256:[0-9a-f]{64}")
_MAX_SAFE_INT: Final = 2**53 - 1

# Domain-separation type strings for PAE. Appended to, never changed.
DOMAIN_JOURNAL_GENESIS: Final = "bernstein/journal-genesis/v1"
DOMAIN_JOURNAL_ENTRY: Final = "bernstein/journal-entry/v1"
DOMAIN_AUDIT_GENESIS: Final = "bernstein/audit-genesis/v1"
DOMAIN_AUDIT_ENTRY: Final = "bernstein/audit-entry/v1"
DOMAIN_RUN_SEAL: Final = "bernstein/run-seal/v1"
DOMAIN_HMAC_KEY_ID: Final = "bernstein/hmac-key-id/v1"
DOMAIN_DATAOPS_ARTIFACT: Final = "bernstein/dataops-artifact/v1"
DOMAIN_DATAOPS_RECEIPT: Final = "bernstein/dataops-receipt/v1"
DOMAIN_COMPUTER_USE_GENESIS: Final = "bernstein/computer-use-genesis/v1"
DOMAIN_TYPED_VALUE: Final = "bernstein/typed-value/v1"
DOMAIN_LINEAGE_ENTRY: Final = "bernstein/lineage-entry/v1"
DOMAIN_AUDIT_RECORD_V2: Final = "bernstein/audit-record/v2"
DOMAIN_CHECKPOINT_GENESIS: Final = "bernstein/checkpoint-genesis/v1"
DOMAIN_PARTITION_CHECKPOINT: Final = "bernstein/partition-checkpoint/v1"
DOMAIN_SUBMISSION: Final = "bernstein/submission/v1"
DOMAIN_TLOG_LEAF: Final = "bernstein/tlog-leaf/v1"


# --------------------------------------------------------------------------
# Canonical JSON (RFC 8785)
# --------------------------------------------------------------------------


MAX_JSON_DEPTH: Final = 64
"""How deeply a hashed JSON document may nest arrays and objects (``{}`` and ``[]`` are depth 1).

One limit for both encoder paths (and for the scheduler's parse of the documents it
checks): deeper values are refused with ``CanonicalizationError``, never a
``RecursionError``, and a cyclic value (infinitely deep) is refused the same way."""


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical JSON bytes of ``value``.

    Floats (and so NaN and infinities) are refused rather than rounded: a
    hashed document must not depend on a float printer. Integers outside
    +/-(2**53 - 1), keys that are not exactly ``str`` (a ``str`` subclass such
    as a StrEnum member is refused too), lone surrogates and nesting deeper
    than ``MAX_JSON_DEPTH`` are refused as well, by one check that runs before
    either encoder, so both paths accept exactly the same values. A guarded
    orjson fast path is used when it is provably byte-identical to the
    reference encoder (every key in the Basic Multilingual Plane).
    """
    if _fast_path_safe(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError as exc:  # e.g. a lone surrogate in a string
            raise CanonicalizationError(f"value has no canonical JSON form: {exc}") from exc
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalizationError(f"value has no canonical JSON form: {exc}") from exc
    except (TypeError, UnicodeError, ValueError, RecursionError) as exc:
        raise CanonicalizationError(f"value has no canonical JSON form: {exc}") from exc


def _fast_path_safe(value: Any) -> bool:
    """Check types, ranges, keys and depth; True when orjson's output equals RFC 8785's.

    Raises CanonicalizationError for values no encoder may accept (floats,
    out-of-range integers, keys that are not exactly ``str``, nesting deeper
    than ``MAX_JSON_DEPTH`` (cycles included), unsupported types).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    bmp_keys_only = True
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str) or item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -_MAX_SAFE_INT <= item <= _MAX_SAFE_INT:
                raise CanonicalizationError(f"integer {item} is outside the RFC 8785 safe range +/-(2**53-1)")
            continue
        if isinstance(item, float):
            raise CanonicalizationError(f"floats are not allowed in hashed documents (got {item!r}); use an integer or a string")
        if isinstance(item, (Mapping, list, tuple)) and depth >= MAX_JSON_DEPTH:
            raise CanonicalizationError(f"value nests arrays and objects deeper than {MAX_JSON_DEPTH} levels (or is cyclic)")
        if isinstance(item, Mapping):
            for key, child in item.items():
                if type(key) is not str:
                    raise CanonicalizationError(f"object keys must be exactly str (got {type(key).__name__} {key!r})")
                if bmp_keys_only and not key.isascii() and any(ord(ch) > 0xFFFF for ch in key):
                    bmp_keys_only = False
                stack.append((child, depth + 1))
            continue
        if isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
            continue
        raise CanonicalizationError(f"type {type(item).__name__} has no canonical JSON form")
    return bmp_keys_only


_NESTING_TOKENS: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_nesting_exceeds(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``data`` opens more than ``limit`` nested arrays or objects.

    A check on the bytes, before any parser recurses into them: the scheduler
    runs it before ``json.loads`` so a deeply nested document is refused with a
    typed code instead of raising ``RecursionError``. Brackets inside strings
    do not count; text that is not JSON at all may be over-counted, which only
    refuses what a parser would refuse anyway.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    for match in _NESTING_TOKENS.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


# --------------------------------------------------------------------------
# Digests
# --------------------------------------------------------------------------


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes: the content hash of a blob or observation."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """True when ``value`` is exactly ``sha256:`` plus 64 lowercase hex digits."""
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def require_digest(value: object, *, field: str = "digest") -> str:
    """Return ``value`` if it is a well-formed digest, else raise MalformedDigest."""
    if not is_digest(value):
        raise MalformedDigest(value, field=field)
    assert isinstance(value, str)
    return value


def digest_hex(digest: str) -> str:
    """The 64 hex digits of a well-formed digest (raises MalformedDigest)."""
    return require_digest(digest)[len(DIGEST_PREFIX) :]


def is_mac(value: object) -> bool:
    """True when ``value`` is exactly ``hmac-sha256:`` plus 64 lowercase hex digits."""
    return isinstance(value, str) and _MAC_RE.fullmatch(value) is not None


def content_hash(data: bytes) -> str:
    """Content hash of an observation's raw bytes (the ref is never hashed)."""
    return sha256_digest(data)


def artifact_hash(artifact: bytes) -> str:
    """Hash of an artifact's bytes; structured artifacts are canonical JSON first."""
    return sha256_digest(artifact)


def evidence_set_hash(content_hashes: Iterable[str]) -> str:
    """Hash of the sorted, de-duplicated observation content hashes.

    The preimage is the canonical JSON array of those strings, so the value is
    independent of capture order and of duplicates; the empty set hashes to
    sha256 of ``[]``. Every member must be a well-formed digest.
    """
    unique = set(content_hashes)
    for member in unique:
        if not isinstance(member, str) or _DIGEST_RE.fullmatch(member) is None:
            raise MalformedDigest(member, field="observation content_hash")
    members = sorted(unique)
    # Well-formed digests need no JSON escaping, so this equals canonical_json(members).
    return sha256_digest(('["' + '","'.join(members) + '"]').encode("ascii") if members else b"[]")


def document_hash(document: Any) -> str:
    """``sha256:`` of a document's canonical JSON bytes."""
    return sha256_digest(canonical_json(document))


# --------------------------------------------------------------------------
# Domain-separated chain steps
# --------------------------------------------------------------------------


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``body`` under ``payload_type``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(body), body)


def journal_genesis(run_id: str) -> str:
    """The ``prev_hash`` of a run's first journal entry; binds the chain to its run."""
    return sha256_digest(pae(DOMAIN_JOURNAL_GENESIS, run_id.encode("utf-8")))


def journal_entry_hash(payload: bytes) -> str:
    """Chain hash of one journal entry: covers the stored payload bytes exactly.

    The payload itself carries ``prev_hash``, so each hash folds its predecessor.
    """
    return sha256_digest(pae(DOMAIN_JOURNAL_ENTRY, payload))


def audit_genesis(key: bytes, partition: int) -> str:
    """The ``prev_mac`` of the first audit record of an input partition's chain."""
    return _mac(key, pae(DOMAIN_AUDIT_GENESIS, str(partition).encode("ascii")))


def audit_mac(key: bytes, payload: bytes) -> str:
    """HMAC-SHA256 over the stored audit payload bytes (which carry ``prev_mac``)."""
    return _mac(key, pae(DOMAIN_AUDIT_ENTRY, payload))


def audit_record_mac(key: bytes, key_id: str, payload: bytes) -> str:
    """The MAC of an AuditRecord.v2: HMAC-SHA256 over ``PAE(audit-record/v2, PAE(key_id, payload))``.

    Unlike v1 (``audit_mac``, payload only), the key id is covered too: editing
    the envelope's ``key_id`` breaks the MAC instead of switching its check off
    (review H3). The inner PAE frames the two stored byte strings unambiguously
    (each length-prefixed), so nothing is re-encoded and any DSSE library can
    build the same bytes.
    """
    return _mac(key, pae(DOMAIN_AUDIT_RECORD_V2, pae(key_id, payload)))


def macs_equal(left: str, right: str) -> bool:
    """Constant-time comparison of two MAC strings."""
    return _hmac.compare_digest(left.encode("ascii", "replace"), right.encode("ascii", "replace"))


def _mac(key: bytes, message: bytes) -> str:
    return MAC_PREFIX + _hmac.new(key, message, hashlib.sha256).hexdigest()


def seal_signing_input(payload: bytes) -> bytes:
    """The exact bytes an Ed25519 run seal signs: PAE over the stored seal payload."""
    return pae(DOMAIN_RUN_SEAL, payload)


def checkpoint_genesis(partition: int) -> str:
    """The ``prev_hash`` of an input partition's first checkpoint."""
    return sha256_digest(pae(DOMAIN_CHECKPOINT_GENESIS, str(partition).encode("ascii")))


def checkpoint_signing_input(payload: bytes) -> bytes:
    """The exact bytes a partition checkpoint's Ed25519 signature covers: PAE over the stored payload."""
    return pae(DOMAIN_PARTITION_CHECKPOINT, payload)


def checkpoint_hash(payload: bytes) -> str:
    """A checkpoint's identity (the next checkpoint's ``prev_hash``): sha256 of its signing input.

    It covers the payload only, never a signature, so that cosignatures added
    later by witnesses do not change what the chain links to.
    """
    return sha256_digest(checkpoint_signing_input(payload))


# --------------------------------------------------------------------------
# The partition's Merkle log (docs/checkpoints.md, "The Merkle log")
# --------------------------------------------------------------------------


def tlog_entry_leaf(run_id: str, seq: int, entry_hash: str) -> bytes:
    """The leaf a journal entry adds to its partition's Merkle log: what it commits to, domain-tagged.

    Small on purpose: a proof of one activity carries the entry, whose hash the leaf names."""
    return pae(DOMAIN_TLOG_LEAF, canonical_json(["entry", run_id, seq, entry_hash]))


def tlog_seal_leaf(run_id: str, entry_count: int, head_hash: str, last_input_offset: int, final: bool, audit_head: str) -> bytes:
    """The leaf a run seal adds: the run's length and chain head, the input it covers and the audit head it
    saw, so a checkpoint commits to every seal's claims without extension lines."""
    return pae(DOMAIN_TLOG_LEAF, canonical_json(["seal", run_id, entry_count, head_hash, last_input_offset, final, audit_head]))


def tlog_origin(log_name: str, input_topic: str, partition: int, epoch: int) -> str:
    """A partition log's checkpoint origin: the deployment's log name, the input topic (so the prefix), the
    partition and the log's epoch (raised when a deployment deliberately starts its topics over)."""
    return f"{log_name}/{input_topic}/{partition}/e{epoch}"


def parse_tlog_origin(origin: str) -> tuple[str, str, int, int] | None:
    """(log name, input topic, partition, epoch) of an origin ``tlog_origin`` makes; None for any other text (a topic
    holds no ``/``, so the last three parts are the topic, the partition and ``e<epoch>``)."""
    parts = origin.rsplit("/", 3)
    if len(parts) != 4 or not parts[0] or not parts[1]:
        return None
    name, topic, partition, epoch = parts
    number = epoch[1:]
    if not _canonical_decimal(partition) or epoch[:1] != "e" or not _canonical_decimal(number):
        return None
    return name, topic, int(partition), int(number)


def _canonical_decimal(text: str) -> bool:
    return text.isascii() and text.isdigit() and str(int(text)) == text


def signing_input(domain: str, document: Any) -> bytes:
    """The exact bytes signed (or MACed) for a structured document: PAE over its canonical JSON."""
    return pae(domain, canonical_json(document))


# --------------------------------------------------------------------------
# Producer signatures (ActivitySubmission.v3, RunClose.v2)
# --------------------------------------------------------------------------

STATEMENT_ACTIVITY: Final = "activity"
STATEMENT_RUN_CLOSE: Final = "run_close"


def submission_statement(record: Mapping[str, Any], key_id: str) -> dict[str, Any]:
    """What a producer signs for an activity submission: every field the journal also keeps.

    ``record`` is an ActivitySubmission (``producer`` nested) or a JournalEntry (``producer_id``)
    of v2 or v3: the statement is the same, so the verifier rebuilds it from the journal alone.
    The artifact is covered by ``artifact_hash`` (the scheduler checks one against the other);
    ``producer.sdk`` is not journalled and not signed.
    """
    producer_id = record["producer"]["id"] if "producer" in record else record["producer_id"]
    return {
        "type": STATEMENT_ACTIVITY,
        "submission_id": record["submission_id"],
        "run_id": record["run_id"],
        "stage_id": record["stage_id"],
        "role": record["role"],
        "producer_id": producer_id,
        "kind": record["kind"],
        "artifact_hash": record["artifact_hash"],
        "evidence_set_hash": record["evidence_set_hash"],
        "observations": [
            {"kind": o["kind"], "ref": o["ref"], "content_hash": o["content_hash"], "size": o.get("size", 0)}
            for o in record["observations"]
        ],
        "terminal_state": record["terminal_state"],
        "reason_code": record["reason_code"],
        "occurred_at_ms": record["occurred_at_ms"],
        "key_id": key_id,
    }


def run_close_statement(submission_id: str, run_id: str, producer_id: str, occurred_at_ms: int, key_id: str) -> dict[str, Any]:
    """What a producer signs to close a run (RunClose.v2; RunSeal.v2 ``closed_by`` keeps every field)."""
    return {
        "type": STATEMENT_RUN_CLOSE,
        "submission_id": submission_id,
        "run_id": run_id,
        "producer_id": producer_id,
        "occurred_at_ms": occurred_at_ms,
        "key_id": key_id,
    }


def submission_signing_input(statement: Mapping[str, Any]) -> bytes:
    """The exact bytes a producer's Ed25519 key signs: ``PAE(bernstein/submission/v1, canonical JSON)``.

    Raises ``CanonicalizationError`` for a statement canonical JSON cannot carry (an integer
    beyond 2**53 - 1): such a submission cannot have a valid signature.
    """
    return signing_input(DOMAIN_SUBMISSION, dict(statement))


# --------------------------------------------------------------------------
# Modalities: data/ops plans, computer-use anchors
# --------------------------------------------------------------------------


def plan_document(input_hashes: Iterable[str], steps: Sequence[str]) -> dict[str, Any]:
    """The data/ops plan projection: sorted, de-duplicated input hashes and the ordered steps."""
    return {
        "input_hashes": sorted({require_digest(h, field="input content_hash") for h in input_hashes}),
        "steps": list(steps),
    }


def plan_hash(input_hashes: Iterable[str], steps: Sequence[str]) -> str:
    """``sha256:`` of the canonical plan projection; byte-identical for the same inputs and steps."""
    return document_hash(plan_document(input_hashes, steps))


def observation_hash(screenshot: bytes, dom_digest: str) -> str:
    """Computer-use observation: sha256(pre-action screenshot bytes || DOM digest string).

    ``dom_digest`` is itself a fixed-length ``sha256:`` digest, so the
    concatenation is unambiguous without a length prefix.
    """
    return sha256_digest(screenshot + require_digest(dom_digest, field="dom_digest").encode("ascii"))


def computer_use_genesis(run_id: str, session_id: str) -> str:
    """The ``prev_anchor`` of a session's first action; binds the chain to its run and session."""
    return sha256_digest(pae(DOMAIN_COMPUTER_USE_GENESIS, canonical_json([run_id, session_id])))


def action_anchor(prev_anchor: str, observation: str, action: Mapping[str, Any]) -> str:
    """sha256(canonical({prev_anchor, observation_hash, action})): one link of the action chain."""
    return document_hash({"prev_anchor": prev_anchor, "observation_hash": observation, "action": dict(action)})


def lineage_signing_input(entry: bytes) -> bytes:
    """The exact bytes a computer-use lineage entry's HMAC envelope and Ed25519 signature cover."""
    return pae(DOMAIN_LINEAGE_ENTRY, entry)


def lineage_hmac(key: bytes, entry: bytes) -> str:
    """The HMAC envelope of a lineage entry, keyed with the producer's own lineage key (``hmac_key_id``
    in the entry names it; entries written before producer identities used the audit key)."""
    return _mac(key, lineage_signing_input(entry))


def action_digest(action: Mapping[str, Any]) -> str:
    """Digest of a canonical action: what the audit mirror carries instead of the target itself."""
    return document_hash(dict(action))


def typed_value_digest(key: bytes, value: str) -> str:
    """Keyed digest of a typed form value: the value itself never enters a chain.

    Keyed (HMAC) rather than a bare hash so a short secret cannot be recovered
    by hashing a dictionary of guesses; the key is the producer's redaction key,
    which never leaves the producer host (no trusted-keys file carries it).
    """
    return _mac(key, pae(DOMAIN_TYPED_VALUE, value.encode("utf-8")))


# --------------------------------------------------------------------------
# Key identifiers
# --------------------------------------------------------------------------


def public_key_id(raw_public_key: bytes) -> str:
    """Key id of an Ed25519 public key: the digest of its 32 raw bytes."""
    if len(raw_public_key) != 32:
        raise CanonicalizationError(f"an Ed25519 public key has 32 bytes, got {len(raw_public_key)}")
    return sha256_digest(raw_public_key)


def hmac_key_id(key: bytes) -> str:
    """Key id of an HMAC key: a domain-separated digest that reveals nothing usable."""
    return sha256_digest(pae(DOMAIN_HMAC_KEY_ID, key))


def sorted_unique(values: Sequence[str]) -> list[str]:
    """Sorted, de-duplicated copy: the normal form of every hash set we commit to."""
    return sorted(set(values))
