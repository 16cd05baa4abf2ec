"""Offline verifier throughput: record and signature checks/s, blob re-hashing against openssl, flat memory.

    python -m bench.verifier [--entries 100000] [--blob-bytes 64000000] [--large-entries 64]

Builds (once; cached under .infra/bench-cache) dumps of one run each, produced by the
real scheduler core, every entry pinning one evidence blob and signed by its producer,
plus the audit chain, the checkpoints and a final seal: ``--entries`` entries with
``--blob-bytes`` of blobs in total (small blobs: 640 bytes by default), the same with a
tenth of both (for memory), and ``--large-entries`` entries sharing ``--blob-bytes``
(large blobs: 1 MB by default). Every dump stays under the scheduler's 64 MiB per-run
evidence cap (schemas.records.MAX_RUN_EVIDENCE_BYTES). Then, in the same run:

1. records (best of 3): ``verify_stream`` with no content store (chain, seals, producer signatures,
   audit MACs and links, checkpoints, evidence sets, stage checks): record checks/s, where a
   record is a journal record, an audit record or a checkpoint; the Ed25519 signature checks
   among them (producer signatures, seals, checkpoints) are counted on their own, with the
   cost of one verification on one core measured here and the share of the machine's two
   cores they take;
2. blobs: the same with the CAS directory (every blob and artifact reattached and
   re-hashed), blob MB/s = CAS bytes / (full time - metadata time), both passes without the
   producer signatures (their cost and its variance would drown the blobs' share), against
   ``openssl dgst -sha256`` over the same files (via xargs, 2000 files a process, one
   process at a time; two at a time printed too), for the large and for the small blobs,
   interleaved, best of 3 each, every pass from a page cache warmed for it;
3. memory: peak RSS of a full verification at 1/10 and at all the entries.

Targets: >= 100,000 record checks/s (``verifier_record_checks_per_second``), blob
re-hashing >= 0.8 x openssl. The last line is ``blob_hash_vs_openssl=<ratio>`` (large
blobs: the hashing speed); ``blob_hash_vs_openssl_small_files`` is the line before.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.memory import peak_rss_mib
from bernstein.consumers.core.model import InputRecord, Producer, ProducerKey, ProducerRegistry, SchedulerConfig, Stream
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    evidence_set_hash,
    run_close_statement,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import AuditKey, Ed25519Signer, KeyPurpose, TrustedKey, TrustedKeys
from bernstein.verifier.sources import DUMP_FORMAT, DumpSource, StoredRecord, encode_dump_line
from bernstein.verifier.verify import verify_stream

REPO = Path(__file__).resolve().parent.parent
RUN = "bench-run"
SIGNER = Ed25519Signer.from_seed(b"\x09" * 32)
AUDIT = AuditKey.from_secret(b"bench-verifier-audit-key-0123456")
PRODUCER = Ed25519Signer.from_seed(b"\x0b" * 32)
"""Signs every submission (ActivitySubmission.v3) and the run close (RunClose.v2): the verifier checks each."""
FORMAT = "signed-v3"
"""The cached dumps' layout: a cache built before producer signatures is rebuilt."""
TOPICS = {
    "journal": "bench.activity.journal",
    "audit": "bench.audit",
    "refusals": "bench.activity.refusals",
    "deadletter": "bench.activity.deadletter",
    "checkpoints": "bench.checkpoints",
}


def trusted() -> TrustedKeys:
    pinned = TrustedKeys(ed25519={SIGNER.key_id: SIGNER.public_key_raw}, hmac={AUDIT.key_id: AUDIT.secret})
    return pinned.merged(
        TrustedKeys.of([TrustedKey(PRODUCER.key_id, KeyPurpose.PRODUCER, PRODUCER.public_key_raw, producer="bench")])
    )


def signed(name: str, record: dict[str, object]) -> bytes:
    """``record`` as the signed schema ``name`` (ActivitySubmission.v3 or RunClose.v2), signed by ``PRODUCER``."""
    if name == codec.RUN_CLOSE_V2:
        statement = run_close_statement(
            str(record["submission_id"]), RUN, "bench", int(str(record["occurred_at_ms"])), PRODUCER.key_id
        )
    else:
        statement = submission_statement(record, PRODUCER.key_id)
    signature = PRODUCER.sign(submission_signing_input(statement))
    return codec.encode(name, {**record, "producer_key_id": PRODUCER.key_id, "producer_signature": signature})


def build_dump(root: Path, entries: int, blob_bytes: int) -> None:
    """Run the real scheduler core over synthetic submissions and write a dump."""
    manifest = root / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("bench_format") == FORMAT:
        return
    if root.exists():
        shutil.rmtree(root)
    print(f"bench: building a dump of {entries} entries and {blob_bytes / 2**30:.2f} GiB of blobs in {root} (cached)", flush=True)
    cas = DirBlobStore(root / "cas")
    core = SchedulerCore(
        SchedulerConfig(
            roles={"developer": "coding"},
            signer=SIGNER,
            audit_key=AUDIT.secret,
            audit_key_id=AUDIT.key_id,
            seal_every=10**9,
            producers=ProducerRegistry.of(
                [
                    Producer(
                        "bench",
                        frozenset({"developer"}),
                        frozenset({"coding"}),
                        (ProducerKey(PRODUCER.key_id, PRODUCER.public_key_raw),),
                    )
                ]
            ),
        )
    )
    state = initial_state(core.config, 0)
    size = max(1, blob_bytes // entries)
    streams = ("journal", "audit", "checkpoints")
    for stream in streams:
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
    files = {stream: (root / "topics" / stream / "0.jsonl").open("wb") for stream in streams}
    offsets = dict.fromkeys(streams, 0)
    seed = os.urandom(size)

    def write(outputs: list) -> None:  # type: ignore[type-arg]
        for out in outputs:
            stream = out.stream.value
            if stream not in files:
                continue
            files[stream].write(
                encode_dump_line(
                    StoredRecord(stream, TOPICS[stream], 0, offsets[stream], out.timestamp_ms, out.key, out.value, out.headers)
                )
            )
            offsets[stream] += 1

    for i in range(entries + 1):
        if i == entries:
            value = signed(
                codec.RUN_CLOSE_V2,
                {"submission_id": "close", "run_id": RUN, "producer": {"id": "bench", "sdk": "bench"}, "occurred_at_ms": i},
            )
        else:
            blob = i.to_bytes(8, "little") + seed[8:]  # unique per entry, cheap to make
            artifact = f"diff {i}\n".encode()
            digest = cas.put(blob)
            cas.put(artifact)
            observations = [{"kind": "page", "ref": f"https://example.org/{i}", "content_hash": digest, "size": len(blob)}]
            value = signed(
                codec.ACTIVITY_SUBMISSION_V3,
                {
                    "submission_id": f"s{i}",
                    "run_id": RUN,
                    "stage_id": f"stage-{i}",
                    "role": "developer",
                    "producer": {"id": "bench", "sdk": "bench"},
                    "kind": "coding",
                    "artifact": artifact,
                    "artifact_hash": sha256_digest(artifact),
                    "evidence_set_hash": evidence_set_hash([digest]),
                    "observations": observations,
                    "terminal_state": "completed",
                    "reason_code": "ok",
                    "occurred_at_ms": i,
                },
            )
        state, outputs = core.step(state, InputRecord("bench.activity.submissions", 0, i, i, RUN.encode(), value))
        if any(o.stream is Stream.REFUSALS or o.stream is Stream.DEADLETTER for o in outputs):
            raise SystemExit("bench: the synthetic input was refused; fix the generator")
        write(outputs)
        if i and i % 20000 == 0:
            print(f"bench:   {i} entries", flush=True)
    for handle in files.values():
        handle.close()
    (root / "manifest.json").write_text(
        json.dumps(
            {"format": DUMP_FORMAT, "runs": [RUN], "entries": entries, "blob_bytes": size * entries, "bench_format": FORMAT}
        )
    )


def run_verify(root: Path, mode: str) -> dict[str, float]:
    """One verification of the dump: ``meta`` (no content store), ``full`` (blobs reattached); ``nosig-meta`` and
    ``nosig-full`` the same with the producer key not pinned (every check but the producer signatures)."""
    keys = trusted()
    if mode.startswith("nosig"):
        keys = TrustedKeys(ed25519={SIGNER.key_id: SIGNER.public_key_raw}, hmac={AUDIT.key_id: AUDIT.secret})
    with_cas = mode.endswith("full")
    started = time.perf_counter()
    header, stages = verify_stream(RUN, DumpSource(root), cas=DirBlobStore(root / "cas") if with_cas else None, trusted=keys)
    count = ok = 0
    for stage in stages:
        count += 1
        ok += not stage.failed  # no store here: stages are "not checked", never failed
    elapsed = time.perf_counter() - started
    if not mode.startswith("nosig") and (not header.ok or ok != count):
        raise SystemExit(f"bench: the dump did not verify ({count - ok} failed stages; header ok={header.ok})")
    if with_cas and ok != count:
        raise SystemExit(f"bench: {count - ok} stages did not reattach their evidence")
    assert header.chain is not None and header.seal is not None and header.audit is not None
    assert header.producers is not None
    return {
        "entries": count,
        "seconds": elapsed,
        "peak_rss_mib": peak_rss_mib(),
        "journal_records": header.chain.entries + header.seal.seals,
        "audit_records": header.audit.records,
        "checkpoints": header.audit.checkpoints,
        "producer_signatures": header.producers.signed,
        "seal_signatures": header.seal.seals,
    }


def child(root: Path, mode: str) -> None:
    print(json.dumps(run_verify(root, mode)))


def run_child(root: Path, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.verifier", "--child", str(root), "--mode", mode],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench: verification failed:\n{out.stdout}\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def tool_seconds(root: Path, tool: list[str], parallel: int = 1) -> float:
    """``tool`` (``openssl dgst -sha256``, ``sha256sum``) over every file of the dump's CAS, 2000 files a process."""
    started = time.perf_counter()
    find = subprocess.Popen(["find", str(root / "cas"), "-type", "f", "-print0"], stdout=subprocess.PIPE)
    subprocess.run(
        ["xargs", "-0", "-n", "2000", "-P", str(parallel), *tool], stdin=find.stdout, stdout=subprocess.DEVNULL, check=True
    )
    find.wait()
    return time.perf_counter() - started


def signature_rate(root: Path) -> tuple[int, float]:
    """(signatures, seconds) of the verifier's own producer-signature check (``FactReader.producer_facts``: the
    statement rebuilt and the Ed25519 signature verified in Rust, in batches on one thread) over every journal record of the
    dump, and nothing else: the floor the signatures put under the record checks."""
    from bernstein.verifier import facts as _facts

    values = [row[3] for rows in DumpSource(root).row_chunks("journal", 0) for row in rows]
    keys = trusted()

    def public_for(key_id: str) -> bytes | None:
        pinned = keys.entry(key_id)
        return None if pinned is None or pinned.is_hmac else pinned.material

    facts = _facts.current()
    best = float("inf")
    count = 0
    for _ in range(3):
        started = time.perf_counter()
        found = [facts.producer_facts(values[i : i + 1000], public_for) for i in range(0, len(values), 1000)]
        best = min(best, time.perf_counter() - started)
        count = sum(1 for batch in found for fact in batch if len(fact) == 5 and fact[4] is True)
    return count, best


def warm(root: Path) -> None:
    """Read the dump's topics and CAS files once (into the page cache)."""
    subprocess.run(["cat", *[str(p) for p in (root / "topics").rglob("*.jsonl")]], stdout=subprocess.DEVNULL, check=True)
    tool_seconds(root, ["cat"])


def blob_pass(root: Path, trials: int = 3) -> dict[str, float]:
    """The verifier's blob re-hash time and openssl's over the same files, interleaved, best of ``trials`` each.

    The verifier's is a full pass minus a metadata pass, both without the producer signatures
    (whose cost, and its variance on a shared machine, is the same in both and would drown the
    blobs' share): what reattaching adds, every evidence blob and artifact re-hashed."""
    blob_bytes = sum(p.stat().st_size for p in (root / "cas").rglob("*") if p.is_file())
    files = sum(1 for p in (root / "cas").rglob("*") if p.is_file())
    openssl = openssl2 = meta = full = float("inf")
    found: dict[str, float] = {}
    for _ in range(trials):
        # every timed pass starts from a page cache warmed for it: on this shared machine a pass of
        # other files evicts part of 200k small blobs, and cold reads would be measured, not hashing
        warm(root)
        openssl = min(openssl, tool_seconds(root, ["openssl", "dgst", "-sha256"]))
        warm(root)
        meta = min(meta, run_child(root, "nosig-meta")["seconds"])
        warm(root)
        found = run_child(root, "nosig-full")
        full = min(full, found["seconds"])
        warm(root)
        openssl2 = min(openssl2, tool_seconds(root, ["openssl", "dgst", "-sha256"], parallel=2))
    hashing = max(full - meta, 1e-3)
    return {
        "files": files,
        "mb": blob_bytes / 1e6,
        "verifier": blob_bytes / 1e6 / hashing,
        "openssl": blob_bytes / 1e6 / openssl,
        "openssl2": blob_bytes / 1e6 / openssl2,
        "entries": found["entries"],
        "meta_seconds": meta,
        "full_seconds": full,
        "peak_rss_mib": found["peak_rss_mib"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--blob-bytes", type=int, default=64_000_000, help="total blob bytes (at most the 64 MiB per-run cap)")
    parser.add_argument("--large-entries", type=int, default=64, help="entries of the large-blob run (blob bytes / this each)")
    parser.add_argument("--cache", type=Path, default=REPO / ".infra" / "bench-cache")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="meta", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.mode)
        return 0

    big = args.cache / f"verifier-{args.entries}-{args.blob_bytes}"
    small = args.cache / f"verifier-{args.entries // 10}-{args.blob_bytes // 10}"
    large = args.cache / f"verifier-{args.large_entries}-{args.blob_bytes}"
    build_dump(big, args.entries, args.blob_bytes)
    build_dump(small, args.entries // 10, args.blob_bytes // 10)
    build_dump(large, args.large_entries, args.blob_bytes)
    subprocess.run(["cat", *[str(p) for p in (big / "topics").rglob("*.jsonl")]], stdout=subprocess.DEVNULL, check=True)

    # 1. record checks: the metadata pass, best of 3 (each in a new process: on this shared machine one pass
    #    can take a third longer)
    metas = [run_child(big, "meta") for _ in range(3)]
    meta = min(metas, key=lambda found: found["seconds"])
    records = meta["journal_records"] + meta["audit_records"] + meta["checkpoints"]
    signatures = meta["producer_signatures"] + meta["seal_signatures"] + meta["checkpoints"]
    signed, signing_seconds = signature_rate(small)
    print(
        f"records:  {records:.0f} records checked (journal {meta['journal_records']:.0f}, audit {meta['audit_records']:.0f}, "
        f"checkpoints {meta['checkpoints']:.0f}) in {meta['seconds']:.2f}s = {records / meta['seconds']:.0f} record checks/s "
        f"({meta['entries'] / meta['seconds']:.0f} entries/s; best of 3: "
        f"{', '.join(str(round(records / found['seconds'])) for found in metas)})"
    )
    print(
        f"signatures: {signatures:.0f} Ed25519 signature checks among them (producer {meta['producer_signatures']:.0f}, seals "
        f"{meta['seal_signatures']:.0f}, checkpoints {meta['checkpoints']:.0f}) = {signatures / meta['seconds']:.0f}/s; "
        f"the producer-signature check alone (Rust, batched, on one core) does "
        f"{signed / signing_seconds:.0f}/s here ({signing_seconds / max(signed, 1) * 1e6:.0f} us per signature)"
    )
    alone = meta["producer_signatures"] * signing_seconds / max(signed, 1)
    print(
        f"the producer signatures alone are {alone:.2f}s of one core's time at that rate ({alone / 2:.2f}s of both "
        f"cores'): the pass took {meta['seconds']:.2f}s"
    )

    # 2. blobs: re-hashing against openssl over the same files, large blobs and many small ones
    large_pass = blob_pass(large)
    small_pass = blob_pass(big)
    small_full = run_child(small, "full")
    warm(big)
    big_full = run_child(big, "full")
    for name, found in (("large", large_pass), ("small", small_pass)):
        print(
            f"blobs ({name}): {found['files']:.0f} files, {found['mb']:.0f} MB: verifier {found['verifier']:.0f} MB/s "
            f"(full pass {found['full_seconds']:.2f}s - metadata pass {found['meta_seconds']:.2f}s, best of 3, no producer "
            f"signatures), openssl dgst -sha256 {found['openssl']:.0f} MB/s (one process at a time), "
            f"{found['openssl2']:.0f} MB/s (two at a time)"
        )
    print(
        f"memory:   peak RSS {small_full['peak_rss_mib']:.0f} MiB at {small_full['entries']:.0f} entries, "
        f"{big_full['peak_rss_mib']:.0f} MiB at {big_full['entries']:.0f} entries"
    )
    print(f"verifier_record_checks_per_second={records / meta['seconds']:.0f}")
    print(f"verifier_signature_checks_per_second={signatures / meta['seconds']:.0f}")
    print(f"verifier_entries_per_second={meta['entries'] / meta['seconds']:.0f}")
    print(f"verifier_entries_per_second_with_blobs={big_full['entries'] / big_full['seconds']:.0f}")
    print(f"blob_hash_vs_openssl_small_files={small_pass['verifier'] / small_pass['openssl']:.2f}")
    print(f"blob_hash_vs_openssl={large_pass['verifier'] / large_pass['openssl']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
