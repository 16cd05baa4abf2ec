#!/usr/bin/env python3
"""Local infrastructure for bernstein: one Kafka 4.x broker (KRaft, combined
broker+controller), or a three-node cluster of such nodes (`up --brokers 3`), and
one MinIO server (the content-addressed store: a versioned bucket with Object Lock, and
one S3 identity each for producers, readers and ops, in .infra/s3/<name>.env).

No Docker needed: Kafka runs as a plain JVM process from jars fetched once from Maven
Central (see infra/kafka/pom.xml); MinIO is built once from the Go module proxy into
~/.cache/bernstein (BERNSTEIN_TOOL_CACHE). Standard library only; confluent_kafka
(Kafka readiness probe) and minio (bucket creation) are imported lazily from the
project venv, so run this with .venv/bin/python (the infra/up, infra/down and
infra/status wrappers do).

    infra.py up             start what is not running, wait until ready, write .infra/env
    infra.py up --secure    the same with the broker's SASL_SSL listener (SCRAM users, ACLs enforced)
    infra.py up --brokers 3 a local three-node KRaft cluster (each node broker+controller) instead
    infra.py node stop|start N  stop or start node N (1-3) of the three-node cluster (data is kept)
    infra.py down           stop both services (SIGTERM, then SIGKILL after 30 s)
    infra.py status         print state; exit 0 only if both services are ready
    infra.py restart-kafka  stop and start the broker only (data is kept)
    infra.py reset          down, then delete all data, ports and the cluster id (jars are kept)

Options (before or after the subcommand): --root DIR (state goes to DIR/.infra;
default: the repository root), --timeout SECONDS (readiness deadline).

If BERNSTEIN_KAFKA_BOOTSTRAP / BERNSTEIN_S3_ENDPOINT are set (and do not point at
this root's own services) the corresponding service is treated as external: it is
probed, never started or stopped.

This file is only the command line the wrappers and scripts run; the code is the package
infra/ (its __init__ maps the modules), which tests import as ``infra``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _import_path() -> None:
    """Run as a script, Python puts infra/ itself first on sys.path, where this file would be found as ``infra`` and
    the package's modules as top-level names; the repository root takes its place, so ``infra`` is the package."""
    sys.path[:] = [entry for entry in sys.path if Path(entry or os.curdir).resolve() != HERE]
    sys.path.insert(0, str(REPO))


def _reexec_in_venv_if_needed() -> None:
    """`infra/infra.py ...` run by a system python3 switches to the project venv (which has
    confluent_kafka and minio) when the current interpreter lacks them."""
    venv = REPO / ".venv"
    if importlib.util.find_spec("confluent_kafka") is not None or not (venv / "bin" / "python").exists():
        return
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    py = str(venv / "bin" / "python")
    os.execv(py, [py, str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606 - re-run under the venv's python


def _main() -> int:
    from infra.cli import main

    return main()


if __name__ == "__main__":
    _import_path()
    _reexec_in_venv_if_needed()
    sys.exit(_main())
