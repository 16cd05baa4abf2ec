"""The log's side of tlog-witness (``witness submit``): a partition's signed head to a real witness over HTTP,
its cosignature back on the note, and the cosigned checkpoint held against the topics by ``activity verify``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import notes
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_VERIFIED
from bernstein.verifier.verify import audit_chain_findings
from bernstein.verifier.witness.client import collect
from bernstein.verifier.witness.core import Witness
from bernstein.verifier.witness.http import make_server
from bernstein.verifier.witness.store import FileWitnessStore
from tests.support.verdicts import RUN, Built, C, Writer, build_checkpointed

WITNESS = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x31" * 32)
POLICY = f"witness W1 {WITNESS.verifier.vkey}\nquorum W1\n"


def stages(n: int, close: bool) -> Any:
    def script(w: Writer) -> None:
        for i in range(n):
            w.stage(RUN, f"stage-{i}")
        if close:
            w.close(RUN)

    return script


def payloads(b: Built) -> list[dict[str, Any]]:
    return [dict(C.decode(C.decode(r.value or b"").record["payload"]).record) for r in b.records("checkpoints")]


@pytest.fixture(name="b")
def _b(tmp_path: Path) -> Built:
    return build_checkpointed(tmp_path, stages(4, close=True), checkpoint_every=3)


@pytest.fixture(name="url")
def _url(b: Built, tmp_path: Path) -> Iterator[str]:
    origin = f"bernstein/{payloads(b)[-1]['input_topic']}/0/e1"
    log = notes.log_verifier(origin, b.keys.signer.public_key_raw)
    witness = Witness(WITNESS, {origin: [log]}, FileWitnessStore(tmp_path / "state"), clock=lambda: 1_767_225_600)
    server = make_server(witness, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_witness_cosigns_the_newest_head_and_the_verifier_holds_the_topics_to_it(b: Built, url: str) -> None:
    collected = collect(b.source, 0, [(url, WITNESS.verifier)])
    (answer,) = collected.answers
    assert answer.status == 200 and [s.name for s in answer.cosignatures] == [WITNESS.name]
    newest = payloads(b)[-1]
    assert (collected.size, collected.origin) == (newest["tree_size"], f"bernstein/{newest['input_topic']}/0/e1")
    body, opened = notes.open_checkpoint(
        collected.cosigned, [notes.log_verifier(collected.origin, b.keys.signer.public_key_raw), WITNESS.verifier]
    )
    assert body.size == newest["tree_size"] and len(opened.verified) == 2
    trusted = b.trusted.with_witness_policy(POLICY)
    source = b.source.replaced("journal", b.records("journal"))
    source.witnessed = (collected.cosigned,)
    assert b.verify(source, trusted=trusted).exit_code == EXIT_VERIFIED
    # the same topics cut back, all three tails, to the first checkpoint: the witness saw more
    first = payloads(b)[0]
    cut = (
        b.source.replaced("journal", b.records("journal")[: first["tree_size"]])
        .replaced("audit", b.records("audit")[: first["audit_seq"]])
        .replaced("checkpoints", b.records("checkpoints")[:1])
    )
    cut.witnessed = (collected.cosigned,)
    assert b.verify(cut, trusted=trusted).exit_code == EXIT_MISMATCH
    codes = [p.code for p in audit_chain_findings(cut, 0, trusted)]
    assert codes == ["HISTORY_CUT_BEHIND_WITNESSES"]


def test_a_grown_log_is_sent_with_the_consistency_proof_from_what_the_witness_holds(tmp_path: Path, b: Built, url: str) -> None:
    assert collect(b.source, 0, [(url, WITNESS.verifier)]).answers[0].status == 200
    grown = build_checkpointed(tmp_path / "grown", stages(4, close=True), checkpoint_every=3, keys=b.keys)
    assert [c["note"] for c in payloads(grown)] == [c["note"] for c in payloads(b)]  # deterministic: the same log
    # a longer history of the same log: the first four stages, then two more and a close of another run
    longer = build_checkpointed(tmp_path / "longer", _then_another_run(stages(4, close=True)), checkpoint_every=3, keys=b.keys)
    again = collect(longer.source, 0, [(url, WITNESS.verifier)])
    assert again.answers[0].status == 200, again.answers[0].detail
    assert again.size > payloads(b)[-1]["tree_size"]
    # a different history at the witnessed size: refused, the witness keeps its own
    fork = build_checkpointed(tmp_path / "fork", stages(6, close=True), checkpoint_every=3, keys=b.keys)
    refused = collect(fork.source, 0, [(url, WITNESS.verifier)]).answers[0]
    assert refused.status in (409, 422) and not refused.cosignatures


def test_an_unreachable_witness_is_a_refusal_not_an_exception(b: Built) -> None:
    (answer,) = collect(b.source, 0, [("http://127.0.0.1:9", WITNESS.verifier)], timeout=2).answers
    assert answer.status == 0 and answer.detail.startswith("no answer")


def _then_another_run(first: Any) -> Any:
    def script(w: Writer) -> None:
        first(w)
        for i in range(2):
            w.stage("run-b", f"stage-{i}")
        w.close("run-b")

    return script


def test_an_answer_that_is_not_the_witness_s_own_cosignature_is_not_kept(b: Built, url: str) -> None:
    """The client verifies each line (the spec's MUST): a line by another key than the one given is dropped."""
    other = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x32" * 32)
    collected = collect(b.source, 0, [(url, other.verifier)])
    (answer,) = collected.answers
    assert answer.status == 0 and "no line of the answer is a valid cosignature by" in answer.detail
    assert len(notes.parse_note(collected.cosigned).signatures) == 1  # the log's own line, untouched
