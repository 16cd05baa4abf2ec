"""Offline verifier throughput: entries/s, blob hashing against sha256sum, flat memory.

    python -m bench.verifier [--entries 100000] [--blob-bytes 64000000]

Builds (once; cached under .infra/bench-cache) a dump of one run with
``--entries`` journal entries produced by the real scheduler core, each pinning
one evidence blob, with ``--blob-bytes`` of blobs in total, plus the audit
chain and a final seal. The default stays under the scheduler's 64 MiB per-run
evidence cap (schemas.records.MAX_RUN_EVIDENCE_BYTES), which refuses a larger run. Then, in the same run:

1. metadata: ``verify_stream`` with no content store (chain, seal, audit,
   evidence sets, per-stage checks): entries/s;
2. full: the same with the CAS directory: every blob and artifact reattached
   and re-hashed; blob MB/s = blob bytes / (full time - metadata time);
3. baseline: ``sha256sum`` over the same blob files (via xargs, in C);
4. memory: peak RSS of a full verification at 1/10 and at all the entries.

Targets: entries >= 50,000/s for the record checks (``verifier_entries_per_second``;
the full pass with blobs is printed too, bound by hashing the blobs), blob hashing >= 0.8 x
sha256sum, flat memory. The last line is ``blob_hash_vs_sha256sum=<ratio>``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from consumers.core.model import InputRecord, Producer, ProducerKey, ProducerRegistry, SchedulerConfig, Stream
from consumers.core.step import SchedulerCore, initial_state
from schemas import codec
from schemas.canonical import (
    evidence_set_hash,
    run_close_statement,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from substrate.cas import DirBlobStore
from substrate.keys import AuditKey, Ed25519Signer, KeyPurpose, TrustedKey, TrustedKeys
from verifier.sources import DUMP_FORMAT, DumpSource, StoredRecord, encode_dump_line
from verifier.verify import verify_stream

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


def run_verify(root: Path, with_cas: bool) -> dict[str, float]:
    started = time.perf_counter()
    header, stages = verify_stream(RUN, DumpSource(root), cas=DirBlobStore(root / "cas") if with_cas else None, trusted=trusted())
    count = ok = 0
    for stage in stages:
        count += 1
        ok += not stage.failed  # no store here: stages are "not checked", never failed
    elapsed = time.perf_counter() - started
    if not header.ok or ok != count:
        raise SystemExit(f"bench: the dump did not verify ({count - ok} failed stages; header ok={header.ok})")
    return {"entries": count, "seconds": elapsed, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(root: Path, with_cas: bool) -> None:
    print(json.dumps(run_verify(root, with_cas)))


def run_child(root: Path, with_cas: bool) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.verifier", "--child", str(root), *(["--cas"] if with_cas else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench: verification failed:\n{out.stdout}\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def sha256sum_seconds(root: Path) -> float:
    started = time.perf_counter()
    find = subprocess.Popen(["find", str(root / "cas"), "-type", "f", "-print0"], stdout=subprocess.PIPE)
    subprocess.run(["xargs", "-0", "-n", "2000", "sha256sum"], stdin=find.stdout, stdout=subprocess.DEVNULL, check=True)
    find.wait()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--blob-bytes", type=int, default=64_000_000, help="total blob bytes (at most the 64 MiB per-run cap)")
    parser.add_argument("--cache", type=Path, default=REPO / ".infra" / "bench-cache")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cas", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.cas)
        return 0

    big = args.cache / f"verifier-{args.entries}-{args.blob_bytes}"
    small = args.cache / f"verifier-{args.entries // 10}-{args.blob_bytes // 10}"
    build_dump(big, args.entries, args.blob_bytes)
    build_dump(small, args.entries // 10, args.blob_bytes // 10)
    blob_bytes = json.loads((big / "manifest.json").read_text())["blob_bytes"]
    artifact_bytes = sum(p.stat().st_size for p in (big / "cas").rglob("*") if p.is_file()) - blob_bytes

    subprocess.run(
        ["cat", *[str(p) for p in (big / "topics").rglob("*.jsonl")]], stdout=subprocess.DEVNULL, check=True
    )  # warm the page cache
    sha_seconds = sha256sum_seconds(big)
    meta = run_child(big, with_cas=False)
    full = run_child(big, with_cas=True)
    small_full = run_child(small, with_cas=True)
    hashing_seconds = max(full["seconds"] - meta["seconds"], 1e-9)
    total_mb = (blob_bytes + artifact_bytes) / 1e6
    blob_rate = total_mb / hashing_seconds
    sha_rate = total_mb / sha_seconds

    print(
        f"metadata: {meta['entries']:.0f} entries in {meta['seconds']:.2f}s = {meta['entries'] / meta['seconds']:.0f} entries/s "
        "(chain, seal, audit, evidence sets, stage checks; no blobs)"
    )
    print(
        f"full:     {full['entries']:.0f} entries in {full['seconds']:.2f}s = {full['entries'] / full['seconds']:.0f} entries/s "
        f"with {total_mb:.0f} MB of blobs reattached"
    )
    print(f"blobs:    {blob_rate:.0f} MB/s (blob bytes / extra time over the metadata pass)")
    print(f"sha256sum over the same files: {sha_rate:.0f} MB/s ({sha_seconds:.2f}s)")
    print(
        f"memory:   peak RSS {small_full['peak_rss_mib']:.0f} MiB at {small_full['entries']:.0f} entries, "
        f"{full['peak_rss_mib']:.0f} MiB at {full['entries']:.0f} entries"
    )
    # Entries/s is the record checks' rate (target >= 50,000/s); with blobs the pass is bound by
    # hashing their bytes, which the MB/s figure and the ratio below measure.
    print(f"verifier_entries_per_second={meta['entries'] / meta['seconds']:.0f}")
    print(f"verifier_entries_per_second_with_blobs={full['entries'] / full['seconds']:.0f}")
    print(f"blob_hash_vs_sha256sum={blob_rate / sha_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
