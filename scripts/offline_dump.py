"""Write an exported dump of one closed run with no services, for ``bernstein activity verify``.

    python scripts/offline_dump.py OUT_DIR

Uses only the shipped package (no test code, no Kafka, no S3), the way a deployment makes
one, with the transport swapped for memory: fresh scheduler keys (``keys init``) and one
producer's keys (``keys init --producer``) registered in a roles manifest; three signed
coding submissions and a signed run close, their blobs stored first in a directory CAS; the
scheduler's pure core (``make_core``: the Rust core when ``bernstein_native`` is installed,
else the Python reference, which write the same bytes) stepping them as one partition; and
``topic export``'s ``export_dump`` writing the dump. ``keys trust`` pins the keys.

OUT_DIR must not exist or be empty. Writes::

    OUT_DIR/dump/                 the dump (manifest.json, topics/, cas/, keys/)
    OUT_DIR/trusted-keys.json     the verifier's pinned keys (seal, audit, producer)
    OUT_DIR/keys/, producer-keys/, roles.toml, cas/

and prints the command that verifies it (exit 0 expected), the run id first on its line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

from bernstein.commands.keys import export_trust
from bernstein.commands.scheduler import scheduler_config
from bernstein.consumers.core.model import InputRecord
from bernstein.consumers.core.native import make_core
from bernstein.consumers.core.step import initial_state
from bernstein.producers.activity import ActivityResult, observe
from bernstein.producers.emitter import encode_signed_close, encode_signed_submission, submission_record
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import init_keys, init_producer_keys
from bernstein.verifier.export import export_dump
from bernstein.verifier.memory_source import MemorySource
from bernstein.verifier.sources import StoredRecord

RUN: Final = "offline-run-1"
PRODUCER: Final = "offline-coder"
PREFIX: Final = "offline"
TOPICS: Final = {
    "journal": "activity.journal",
    "refusals": "activity.refusals",
    "audit": "audit",
    "deadletter": "activity.deadletter",
    "checkpoints": "checkpoints",
}
T0: Final = 1_800_000_000_000


def write_dump(out: Path) -> tuple[str, Path, Path]:
    """(run id, dump directory, trusted-keys file) of a fresh closed run written under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"offline_dump: {out} is not empty")
    keys = init_keys(out / "keys")
    producer = init_producer_keys(out / "producer-keys", PRODUCER)
    public = producer.signer.public_key_raw.hex()
    roles = out / "roles.toml"
    roles.write_text(
        '[[roles]]\nrole = "developer"\n\n'
        f'[[producers]]\nname = "{PRODUCER}"\nroles = ["developer"]\n'
        f'  [[producers.keys]]\n  public_key = "{public}"\n  valid_from_ms = 0\n',
        encoding="utf-8",
    )
    config = scheduler_config(keys, roles, 2)
    core = make_core(config, 0)
    state: Any = initial_state(config, 0)  # a SchedulerState, or the native core's handle on it
    store = DirBlobStore(out / "cas")
    source = MemorySource()
    next_offset: dict[str, int] = {}

    def step(offset: int, value: bytes) -> None:
        nonlocal state
        record = InputRecord(f"{PREFIX}.activity.submissions", 0, offset, T0 + offset, RUN.encode(), value)
        state, outputs = core.step(state, record)
        for output in outputs:
            stream = output.stream.value
            at = next_offset.get(stream, 0)
            next_offset[stream] = at + 1
            topic = f"{PREFIX}.{TOPICS[stream]}"
            source.add(StoredRecord(stream, topic, 0, at, output.timestamp_ms, output.key, output.value, output.headers))

    for i in range(3):
        files = [f"def f{i}_{n}():\n    return {n}\n".encode() * 8 for n in range(2)]
        for blob in files:
            store.put(blob)
        diff = f"--- a/m{i}.py\n+++ b/m{i}.py\n@@ -0,0 +1 @@\n+x = {i}\n".encode()
        store.put(diff)
        result = ActivityResult.build("coding", diff, [observe("file", f"src/m{i}_{n}.py", b) for n, b in enumerate(files)])
        record = submission_record(
            result,
            submission_id=f"sub-{i}",
            run_id=RUN,
            stage_id=f"code-{i}",
            role="developer",
            producer_id=PRODUCER,
            sdk="offline-dump",
        )
        record["occurred_at_ms"] = T0 + i
        step(i, encode_signed_submission(record, producer.signer))
    step(
        3,
        encode_signed_close(
            submission_id="close", run_id=RUN, producer_id=PRODUCER, occurred_at_ms=T0 + 3, signer=producer.signer
        ),
    )

    trusted = export_trust(keys.key_ring, roles)
    trusted_path = out / "trusted-keys.json"
    trusted.write(trusted_path)
    dump = out / "dump"
    summary = export_dump(source, dump, cas=store, runs=[RUN], trusted=trusted)
    if summary.missing_blobs:
        raise SystemExit(f"offline_dump: blobs missing from the export: {summary.missing_blobs}")
    return RUN, dump, trusted_path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 3
    run, dump, trusted = write_dump(Path(argv[0]))
    print(f"{run} bernstein activity verify {run} --from {dump} --trusted-keys {trusted}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
