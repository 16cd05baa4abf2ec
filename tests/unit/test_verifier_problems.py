"""Every Problem code the verifier can report is documented, and a Problem's location is unambiguous."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bernstein.verifier import audit_chain
from bernstein.verifier.archive import verdict as archive_verdict
from bernstein.verifier.report import Problem

REPO = Path(__file__).resolve().parents[2]


def _codes_in_source() -> set[str]:
    """Codes passed to ``Problem(...)`` / ``self._disagree(...)`` or assigned to ``code`` in the verifier's modules
    that report problems (verifier/verify.py, verifier/walks/, verifier/stages.py, verifier/checkpoints.py,
    verifier/keyuse.py, and verifier/blobs.py: a stage not checked because the store did not answer,
    ``STORE_UNAVAILABLE``). A finding built
    elsewhere and placed later (``Problem(finding.code, ...)``) has its code assigned to ``code`` where it is built.

    Fails on a code given any other way (a keyword, an expression), which the scan could not read.
    """
    codes: set[str] = set()
    for module in (
        "verify.py",
        "walks/chain.py",
        "walks/partition.py",
        "walks/audit.py",
        "stages.py",
        "checkpoints.py",
        "keyuse.py",
        "blobs.py",
        "tlog.py",
        "proof.py",
        "rewriting.py",
    ):
        codes |= _codes_in(ast.parse((REPO / "verifier" / module).read_text(encoding="utf-8")))
    # the one judgement of the audit chain, and the archive check (``activity verify --wacz``), name theirs in one tuple
    return codes | set(audit_chain.CODES) | set(archive_verdict.CODES)


def _codes_in(tree: ast.Module) -> set[str]:
    codes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name not in ("Problem", "_disagree"):
                continue
            assert not any(k.arg == "code" for k in node.keywords), f"line {node.lineno}: code as a keyword"
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                codes.add(first.value)
            elif isinstance(first, ast.Attribute) and first.attr == "code":
                continue  # a KeyFinding's code: assigned to ``code`` as a literal where the finding is built
            else:
                assert isinstance(first, ast.Name) and first.id == "code", f"line {node.lineno}: unreadable code"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                value = node.value
                assert isinstance(value, ast.Constant) and isinstance(value.value, str), f"line {node.lineno}"
                codes.add(value.value)
    return codes


def _codes_in_docs() -> set[str]:
    text = (REPO / "docs" / "verifier.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([A-Z][A-Z_]+)` \|", text, re.MULTILINE))


def test_every_reported_code_is_documented_and_every_documented_code_exists() -> None:
    in_source = _codes_in_source()
    assert len(in_source) >= 30  # the scan itself still finds the codes
    assert in_source == _codes_in_docs()


def test_a_problem_offset_always_names_its_stream() -> None:
    assert Problem("X", "m", stream="audit", offset=3, audit_seq=1).to_json() == {
        "code": "X",
        "message": "m",
        "stream": "audit",
        "offset": 3,
        "audit_seq": 1,
    }
    assert Problem("X", "m", seq=4).to_json() == {"code": "X", "message": "m", "seq": 4}
    with pytest.raises(ValueError, match="needs one of the streams"):
        Problem("X", "m", offset=3)
    with pytest.raises(ValueError, match="needs one of the streams"):
        Problem("X", "m", stream="journal")
    with pytest.raises(ValueError, match="needs one of the streams"):
        Problem("X", "m", stream="seals", offset=3)
