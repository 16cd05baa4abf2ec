"""``bernstein topic export``: a self-contained dump an auditor can verify offline.

Layout::

    manifest.json                     what was exported (no timestamps: exports are reproducible), and
                                      where each exported audit chain's input partition starts (log_start)
    topics/<stream>/<partition>.jsonl every record as stored: value, key, headers, offset, timestamp
    cas/sha256/<aa>/<hex>             every blob the exported entries reference
    keys/public-keys.json             the install's public keys, for convenience only:
                                      the verifier trusts nothing it is not handed explicitly
    wacz/<run>.wacz                   with ``topic export --wacz`` only: the run's research pages as a web
                                      archive (``bernstein.verifier.archive``, written from the dump once it is)

For selected runs, the journal and refusal records of those runs are exported,
and the audit, checkpoint and dead-letter partitions they live on are exported
whole (an audit chain cannot be checked with holes in it, the signed
checkpoints commit to its length and head, and the chain mirrors every dead
letter of the partition, which the verifier checks against it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import is_digest
from bernstein.schemas.records import ENTRY_ACTIVITY_RESULT
from bernstein.substrate.cas import BlobStore, CasError, CasUnavailable, DirBlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.sources import DUMP_FORMAT, STREAMS, RecordSource, StoredRecord, encode_dump_line


@dataclass(frozen=True)
class ExportSummary:
    directory: Path
    records: dict[str, int]
    blobs: int
    missing_blobs: tuple[str, ...]
    runs: tuple[str, ...] | None


def referenced_digests(record: StoredRecord) -> list[str]:
    """Blob digests a journal record names (observations and artifact of an activity result)."""
    c = codec.default_codec()
    try:
        decoded = c.decode(record.value or b"", expect=frozenset({codec.JOURNAL_RECORD}))
        entry = c.decode(decoded.record["payload"]).record
    except codec.DecodeError:
        return []
    digests: list[str] = []
    if entry.get("entry_type") == ENTRY_ACTIVITY_RESULT:
        digests.append(entry["artifact_hash"])
        digests.extend(o["content_hash"] for o in entry["observations"])
    for name in ("screenshot_hash", "dom_digest"):  # computer-use actions: the bytes each step saw
        if name in entry:
            digests.append(entry[name])
    return [d for d in digests if is_digest(d)]


def export_dump(
    source: RecordSource,
    destination: Path,
    *,
    cas: BlobStore | None,
    runs: Iterable[str] | None,
    trusted: TrustedKeys | None,
    extra_digests: Callable[[bytes], list[str]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExportSummary:
    """Write a dump of ``runs`` (or everything when None) into ``destination``."""
    wanted = None if runs is None else {r.encode() for r in runs}
    destination.mkdir(parents=True, exist_ok=True)
    if any(destination.iterdir()):
        from bernstein.schemas.errors import MalformedInput

        raise MalformedInput(f"{destination} is not empty; export into a new directory")
    counts: dict[str, int] = {}
    partition_files: dict[str, dict[str, Any]] = {}
    digests: set[str] = set()
    audit_partitions: set[int] = set()

    for stream in ("journal", "refusals"):
        for partition in source.partitions(stream):
            records = (r for r in source.records(stream, partition) if wanted is None or r.key in wanted)
            written = _write_partition(
                destination, stream, partition, records, on_record=_collect(stream, digests, audit_partitions, extra_digests)
            )
            if written["records"]:
                partition_files.setdefault(stream, {})[str(partition)] = written
                counts[stream] = counts.get(stream, 0) + written["records"]
    for stream in ("audit", "checkpoints", "deadletter"):
        for partition in source.partitions(stream):
            if wanted is not None and partition not in audit_partitions:
                continue
            written = _write_partition(destination, stream, partition, source.records(stream, partition), on_record=None)
            if written["records"]:
                partition_files.setdefault(stream, {})[str(partition)] = written
                counts[stream] = counts.get(stream, 0) + written["records"]
        if progress:
            progress(f"exported {counts.get(stream, 0)} {stream} records")

    # where each exported audit chain's input partition starts: the verifier's first-offset check needs it
    log_start = getattr(source, "log_start", None)
    input_starts = {
        str(partition): int(log_start("submissions", partition)) if callable(log_start) else 0
        for partition in sorted(int(p) for p in partition_files.get("audit", {}))
    }

    missing: list[str] = []
    copied = 0
    if cas is not None:
        target = DirBlobStore(destination / "cas")
        for digest in sorted(digests):
            try:
                target.put(cas.get(digest))
                copied += 1
            except CasUnavailable as exc:  # an outage is not a missing blob: the dump would read as tampered
                raise exc.restated(
                    f"{exc}; the dump in {destination} is incomplete (no blob after {copied} copied): export again "
                    "once the store answers"
                ) from exc
            except CasError:
                missing.append(digest)
        if progress:
            progress(f"copied {copied} blobs ({len(missing)} missing from the store)")

    keys_dir = destination / "keys"
    keys_dir.mkdir(exist_ok=True)
    # public keys only, with their purposes and lifetimes (an audit secret never goes into a dump)
    public = trusted.without_audit_keys() if trusted is not None else TrustedKeys()
    (keys_dir / "public-keys.json").write_text(json.dumps(public.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    manifest = {
        "format": DUMP_FORMAT,
        "created_by": "bernstein topic export",
        "runs": None if runs is None else sorted(r.decode() for r in wanted or ()),
        "streams": {stream: partition_files.get(stream, {}) for stream in STREAMS},
        "log_start": {"submissions": input_starts},
        "blobs": copied,
        "missing_blobs": missing,
        "note": "keys/public-keys.json is informational; verify with --trusted-keys naming keys you trust",
    }
    (destination / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    selected = None if wanted is None else tuple(sorted(r.decode() for r in wanted))
    return ExportSummary(destination, counts, copied, tuple(missing), selected)


def _collect(
    stream: str, digests: set[str], audit_partitions: set[int], extra: Callable[[bytes], list[str]] | None
) -> Callable[[StoredRecord], None]:
    def on_record(record: StoredRecord) -> None:
        audit_partitions.add(record.partition)
        if stream == "journal":
            digests.update(referenced_digests(record))
            if extra is not None and record.value is not None:
                digests.update(d for d in extra(record.value) if is_digest(d))

    return on_record


def _write_partition(
    destination: Path,
    stream: str,
    partition: int,
    records: Iterable[StoredRecord],
    *,
    on_record: Callable[[StoredRecord], None] | None,
) -> dict[str, Any]:
    directory = destination / "topics" / stream
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{partition}.jsonl"
    hasher = hashlib.sha256()
    count = 0
    first = last = None
    with path.open("wb") as handle:
        for record in records:
            line = encode_dump_line(record)
            handle.write(line)
            hasher.update(line)
            count += 1
            first = record.offset if first is None else first
            last = record.offset
            if on_record is not None:
                on_record(record)
        handle.flush()
        os.fsync(handle.fileno())
    if count == 0:
        path.unlink()
    return {"records": count, "first_offset": first, "last_offset": last, "sha256": hasher.hexdigest()}
