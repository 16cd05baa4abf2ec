"""docs/producing.md, the producer contract, says what the code does.

The refusal-code table lists exactly the ``RefusalCode`` members and the dead-letter table
exactly the ``DeadLetterCode`` members; every code, schema and in-page link the page names
exists; the limits and example values it quotes are the ones the code uses; the ``.avsc``
docs point at the page instead of at Python modules; and the Avro array block forms it
promises the scheduler accepts are accepted, with the same outputs, by both cores.
"""

from __future__ import annotations

import json
import re
import unicodedata
import zlib
from pathlib import Path
from typing import Any

from bernstein.consumers.core.model import DEFAULT_MAX_OUTPUT_BYTES, InputRecord, OutputRecord, SchedulerConfig
from bernstein.consumers.core.native import make_core, native_status
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import MAX_JSON_DEPTH, artifact_hash, evidence_set_hash, sha256_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.partitioning import murmur2, partition_for
from bernstein.schemas.records import (
    MAX_ID_LENGTH,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_KIND_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_LINEAGE_ENTRY_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_OBSERVATIONS,
    MAX_OCCURRED_AT_MS,
    MAX_REASON_CODE_LENGTH,
    MAX_REF_LENGTH,
    MAX_RUN_EVIDENCE_BYTES,
    DeadLetterCode,
    RefusalCode,
)
from bernstein.substrate.keys import AuditKey, Ed25519Signer
from tests.support.producers import TEST_PRODUCERS, encode_signed_submission
from tests.support.roles import ROLES

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "producing.md"
TEXT = DOC.read_text(encoding="utf-8")

KAFKA_WORDS = frozenset({"TOPIC_AUTHORIZATION_FAILED", "SASL_SSL", "SASL_PLAINTEXT"})
"""Upper-case names the page quotes from Kafka itself (an error name, security protocols)."""


def _section(heading: str) -> str:
    """The text of the ``## heading`` section, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", TEXT, re.MULTILINE | re.DOTALL)
    assert match is not None, f"docs/producing.md has no section '## {heading}'"
    return match.group(1)


def _table_codes(heading: str) -> list[str]:
    return re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", _section(heading), re.MULTILINE)


def _verifier_codes() -> set[str]:
    text = (REPO / "docs" / "verifier.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([A-Z][A-Z_]+)` \|", text, re.MULTILINE))


def _error_codes() -> set[str]:
    """The stable codes of the typed errors (``BernsteinError`` and every subclass the SDK and substrate define)."""
    import bernstein.producers.emitter  # noqa: F401 - defines the SDK's errors (and imports substrate's)

    codes, todo = set(), [BernsteinError]
    while todo:
        cls = todo.pop()
        codes.add(cls.code)
        todo.extend(cls.__subclasses__())
    return codes


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = unicodedata.normalize("NFC", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


# -- codes ---------------------------------------------------------------------------------


def test_the_refusal_table_lists_every_refusal_code_once_and_nothing_else() -> None:
    listed = _table_codes("Refusal codes")
    assert len(listed) == len(set(listed)), f"listed twice: {sorted({c for c in listed if listed.count(c) > 1})}"
    assert set(listed) == {code.value for code in RefusalCode}, (
        f"missing from the table: {sorted({c.value for c in RefusalCode} - set(listed))}; "
        f"not a RefusalCode: {sorted(set(listed) - {c.value for c in RefusalCode})}"
    )


def test_the_dead_letter_table_lists_every_dead_letter_code() -> None:
    listed = _table_codes("Dead-letter codes")
    assert sorted(listed) == sorted(code.value for code in DeadLetterCode)


def test_every_code_the_page_names_exists() -> None:
    """A backticked UPPER_CASE name is a refusal, dead-letter or verifier code, a typed error's code, a setting, or Kafka's."""
    known = {c.value for c in RefusalCode} | {c.value for c in DeadLetterCode} | _verifier_codes() | KAFKA_WORDS
    known |= _error_codes()
    named = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", TEXT))
    unknown = {name for name in named if not name.startswith("BERNSTEIN_")} - known
    assert not unknown, f"docs/producing.md names codes that do not exist: {sorted(unknown)}"
    assert len(named) > 60  # the scan still sees the tables


# -- schemas, links ------------------------------------------------------------------------


def test_every_schema_the_page_names_exists() -> None:
    named = set(re.findall(r"\b([A-Z][A-Za-z]+\.v\d+)\b", TEXT))
    shipped = {path.stem for path in (REPO / "schemas" / "avro").glob("*.avsc")}
    assert {"ActivitySubmission.v3", "RunClose.v2", "ComputerUseAction.v2"} <= named
    assert named <= shipped, f"no such schema: {sorted(named - shipped)}"


def test_the_fingerprints_the_page_quotes_are_the_schemas() -> None:
    quoted = re.findall(r"`([A-Za-z]+\.v\d+)` is `([0-9a-f]{16})`", TEXT)
    assert len(quoted) == 3
    for name, fingerprint in quoted:
        assert codec.default_codec().schema(name).fingerprint.hex() == fingerprint, name


def test_every_in_page_link_and_every_linked_doc_exists() -> None:
    anchors = _anchors(TEXT)
    for target in re.findall(r"\]\(#([^)]+)\)", TEXT):
        assert target in anchors, f"docs/producing.md links to #{target}, which is no heading"
    for target in re.findall(r"\]\(([a-z_]+\.md)\)", TEXT):
        assert (REPO / "docs" / target).is_file(), target


def _avsc_docs(node: Any, where: str, out: list[tuple[str, str]]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("doc"), str):
            out.append((f"{where}/{node.get('name', '')}", node["doc"]))
        for value in node.values():
            _avsc_docs(value, f"{where}/{node.get('name', '')}", out)
    elif isinstance(node, list):
        for value in node:
            _avsc_docs(value, where, out)


def test_avsc_docs_point_at_the_producer_contract_not_at_python() -> None:
    """A schema is read by people in any language: its docs name doc sections, never Python modules."""
    anchors = _anchors(TEXT)
    linked = 0
    for path in sorted((REPO / "schemas" / "avro").glob("*.avsc")):
        docs: list[tuple[str, str]] = []
        _avsc_docs(json.loads(path.read_text(encoding="utf-8")), path.stem, docs)
        for where, doc in docs:
            assert not re.search(r"\bschemas\.[a-z_]+|\bconsumers\.|\bproducers\.|\.py\b|\bMAX_[A-Z]", doc), (
                f"{where}: doc names Python code: {doc!r}"
            )
            for anchor in re.findall(r"docs/producing\.md#([a-z0-9-]+)", doc):
                assert anchor in anchors, f"{where}: docs/producing.md has no section #{anchor}"
                linked += 1
    assert linked >= 10  # the producer-facing schemas do point at the page


# -- numbers the page quotes ---------------------------------------------------------------


def _says(text: str) -> None:
    assert text in TEXT, f"docs/producing.md should say {text!r}"


def test_the_limits_the_page_quotes_are_the_codes() -> None:
    _says(f"1 to {MAX_ID_LENGTH} characters of `A-Z a-z 0-9 _ . : @ + = -`")
    _says(f"1 to {MAX_LABEL_LENGTH} characters, no control characters")
    _says(f"at most {MAX_INLINE_ARTIFACT_BYTES:,} bytes (512 KiB)")
    _says(f"at most {MAX_OBSERVATIONS:,}")
    _says(f"1 to {MAX_KIND_LENGTH} characters, not only whitespace")
    _says(f"0 to {MAX_REF_LENGTH:,} characters")
    _says(f"at most {MAX_REASON_CODE_LENGTH} characters")
    _says(f"0 to {MAX_RUN_EVIDENCE_BYTES:,}")
    _says(f"0 to {MAX_OCCURRED_AT_MS:,} (9999-12-31T23:59:59.999Z)")
    _says(f"at most {MAX_LINEAGE_ENTRY_BYTES:,} bytes")
    _says(f"at most {MAX_JSON_DEPTH} deep")
    _says(f"fit in {DEFAULT_MAX_OUTPUT_BYTES:,} bytes")
    _says(f"up to {MAX_MESSAGE_BYTES:,} bytes")
    _says(f"`{evidence_set_hash([])}`")


def test_the_partitioner_example_is_murmur2_and_not_crc32() -> None:
    key = b"run-42"
    _says(f"hashes to {murmur2(key)}, so on 6 partitions it goes to partition {partition_for(key, 6)}")
    _says(f"which puts `run-42` on partition {zlib.crc32(key) % 6} of 6")
    assert partition_for(key, 6) != zlib.crc32(key) % 6  # the example shows the trap


def test_the_worked_example_is_the_run_close_vector() -> None:
    vectors = json.loads((REPO / "schemas" / "vectors" / "avro.json").read_text(encoding="utf-8"))
    (case,) = [s for s in vectors["schemas"] if s["schema"] == "RunClose.v2"]
    value = bytes.fromhex(case["single_object_hex"])
    _says(f"the `RunClose.v2` vector of `avro.json` ({len(value)} bytes)")
    block = _section("Avro encoding").split("```")[3]
    shown = value.hex()
    position, elided = 0, False
    for line in block.strip().splitlines():
        for token in line.split():
            if not re.fullmatch(r"[0-9a-f.]+", token):
                break  # the rest of the line describes the bytes
            for index, piece in enumerate(token.split("...")):
                elided = elided or index > 0
                found = shown.find(piece, position)
                assert found == position or (elided and found > position), f"{line!r} is not the vector's bytes"
                position, elided = found + len(piece), False
            elided = token.endswith("...")
    assert position == len(shown) and shown.startswith("c301db9ec4c62cd786ed")


# -- the array block forms -------------------------------------------------------------------


def _config() -> SchedulerConfig:
    audit = AuditKey.from_secret(b"a" * 32)
    return SchedulerConfig(
        roles=ROLES,
        signer=Ed25519Signer.from_seed(bytes(range(32))),
        audit_key=audit.secret,
        audit_key_id=audit.key_id,
        producers=TEST_PRODUCERS,
    )


def _block_forms() -> dict[str, bytes]:
    """One signed ActivitySubmission.v3 with two observations, its array written four valid ways."""
    blobs = [b"first blob", b"second blob"]
    observations: list[dict[str, Any]] = [
        {"kind": "file", "ref": f"src/f{i}.go", "content_hash": sha256_digest(b), "size": len(b)} for i, b in enumerate(blobs)
    ]
    artifact = b"--- a\n+++ b\n"
    record = {
        "submission_id": "0" * 32,
        "run_id": "run-blocks",
        "stage_id": "code-0",
        "role": "developer",
        "producer": {"id": "tests@host", "sdk": "test"},
        "kind": "coding",
        "artifact": artifact,
        "artifact_hash": artifact_hash(artifact),
        "evidence_set_hash": evidence_set_hash(str(o["content_hash"]) for o in observations),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1_767_225_600_000,
    }
    value = encode_signed_submission(record)
    schema = json.loads((REPO / "schemas" / "avro" / "ActivitySubmission.v3.avsc").read_text(encoding="utf-8"))
    (items,) = [f["type"]["items"] for f in schema["fields"] if f["name"] == "observations"]
    write_item = codec._compile(items)
    first, second = (write_item(o) for o in observations)
    long = codec._long
    one_block = long(2) + first + second + b"\x00"
    assert value.count(one_block) == 1  # what our encoder writes: one block, then 00
    return {
        "one block": value,
        "two blocks": value.replace(one_block, long(1) + first + long(1) + second + b"\x00"),
        "negative count with size": value.replace(one_block, long(-2) + long(len(first + second)) + first + second + b"\x00"),
        "two sized blocks": value.replace(
            one_block, long(-1) + long(len(first)) + first + long(-1) + long(len(second)) + second + b"\x00"
        ),
    }


def _outputs(core: Any, value: bytes) -> list[OutputRecord]:
    record = InputRecord("bernstein.activity.submissions", 0, 7, 1_767_225_600_000, b"run-blocks", value)
    _, outputs = core.step(initial_state(_config(), 0), record)
    return list(outputs)


def test_the_scheduler_accepts_any_valid_array_block_form_with_identical_outputs() -> None:
    forms = _block_forms()
    cores: dict[str, Any] = {"python": SchedulerCore(_config())}
    if native_status()[0]:
        cores["native"] = make_core(_config(), 0, "native")
    expected = _outputs(cores["python"], forms["one block"])
    assert [codec.decode(o.value).schema.name for o in expected] == ["JournalRecord.v1", "AuditRecord.v2"]
    reference = codec.decode(forms["one block"]).record
    for name, value in forms.items():
        assert codec.decode(value).record == reference, name
        for core_name, core in cores.items():
            assert _outputs(core, value) == expected, f"{name} on the {core_name} core"
