"""An S3 store that does not answer is an outage, never tampering (usability review).

The run's records are intact and its blobs sit in the real MinIO. Verified through a store that is
unreachable (nothing listens on the port) or that refuses the credential (a real 403), every stage
is "not checked" with ``STORE_UNAVAILABLE`` and the verdict is exit 6, within seconds: the first
failure (after the client's own bounded retries) stops all further asks. The same run with one blob
really missing from the reachable store is still exit 2, naming that stage.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bernstein.substrate.cas import CasUnavailable, S3BlobStore, S3Settings
from bernstein.verifier.export import export_dump
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_NOT_FULLY_VERIFIED, EXIT_VERIFIED
from tests.support.verdicts import RUN, Built, build, json_of, text_of


@pytest.fixture
def in_s3(services: Any, tmp_path: Path) -> tuple[Built, S3BlobStore]:
    """The standard verdicts run, its blobs copied into the real bucket."""
    built = build(tmp_path)
    store = S3BlobStore(services.s3)
    for path in sorted((tmp_path / "cas").rglob("*")):
        if path.is_file():
            assert store.put(path.read_bytes()) == "sha256:" + path.name
    assert built.verify(cas=store).exit_code == EXIT_VERIFIED
    return built, store


def assert_outage(built: Built, store: S3BlobStore, reason: str) -> None:
    began = time.monotonic()
    report = built.verify(cas=store)
    took = time.monotonic() - began
    assert report.exit_code == EXIT_NOT_FULLY_VERIFIED, report.header
    assert took < 20, f"{took:.1f}s: the outage was asked about blob after blob"
    assert report.stages and all(s.unchecked.startswith("STORE_UNAVAILABLE: ") and not s.failed for s in report.stages)
    assert reason in report.stages[0].unchecked
    _, lines = text_of(report)
    assert lines[-1].startswith("not fully verified -- not checked: 4 stages;"), lines[-1]
    document = json_of(report)
    assert document["verdict"] == "not_fully_verified"
    assert {s["data"]["code"] for s in document["stages"]} == {"STORE_UNAVAILABLE"}


def test_an_unreachable_store_is_not_fully_verified_never_a_mismatch(in_s3: tuple[Built, S3BlobStore]) -> None:
    built, store = in_s3
    down = S3BlobStore(
        S3Settings("http://127.0.0.1:9", store.settings.access_key, store.settings.secret_key, store.settings.bucket)
    )
    assert_outage(built, down, "is unreachable")


def test_a_store_that_refuses_the_credential_is_not_fully_verified(in_s3: tuple[Built, S3BlobStore]) -> None:
    built, store = in_s3
    refused = S3BlobStore(S3Settings(store.settings.endpoint, store.settings.access_key, "not-the-secret", store.settings.bucket))
    assert_outage(built, refused, "S3 refused")


def test_a_blob_really_missing_from_a_store_that_answers_is_still_a_mismatch(services: Any, tmp_path: Path) -> None:
    built = build(tmp_path)
    own = S3Settings(services.s3.endpoint, services.s3.access_key, services.s3.secret_key, f"outage-{os.urandom(4).hex()}")
    store = S3BlobStore(own)  # a bucket of its own: the run's blobs are deterministic, the shared one has them all
    store.ensure_bucket()
    missing = None
    for path in sorted(p for p in (tmp_path / "cas").rglob("*") if p.is_file()):
        if missing is None and path.read_bytes().startswith(f"{RUN}/stage-0/".encode()):
            missing = path  # one of stage-0's evidence blobs stays out
            continue
        store.put(path.read_bytes())
    assert missing is not None
    report = built.verify(cas=store)
    assert report.exit_code == EXIT_MISMATCH
    failed = [s for s in report.stages if s.failed]
    assert [s.stage_id for s in failed] == ["stage-0"] and "missing from store" in failed[0].reason


def test_export_from_an_unreachable_store_fails_as_an_outage_never_lists_blobs_as_missing(
    in_s3: tuple[Built, S3BlobStore], tmp_path: Path
) -> None:
    built, store = in_s3
    down = S3BlobStore(
        S3Settings("http://127.0.0.1:9", store.settings.access_key, store.settings.secret_key, store.settings.bucket)
    )
    with pytest.raises(CasUnavailable, match="is incomplete .*export again once the store answers"):
        export_dump(built.source, tmp_path / "dump", cas=down, runs=[RUN], trusted=built.trusted)
    export_dump(built.source, tmp_path / "whole", cas=store, runs=[RUN], trusted=built.trusted)
    manifest = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    assert manifest["missing_blobs"] == [] and manifest["blobs"] > 0
