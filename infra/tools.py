"""The programs infra runs, fetched or built once: java (17+), Kafka's jars from Maven Central, MinIO from the
Go module proxy; and the Python packages of the venv that the commands need."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time

from infra.base import REPO, InfraError, say
from infra.paths import MINIO_VERSION, Paths

KAFKA_POM = REPO / "infra" / "kafka" / "pom.xml"
MVN_DEP_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0"
MINIO_MODULE = "github.com/minio/minio"


def _need_tool(name: str, hint: str) -> str:
    exe = shutil.which(name)
    if not exe:
        raise InfraError(f"{name} not found on PATH: {hint}")
    return exe


@functools.lru_cache(maxsize=1)
def java_exe() -> str:
    exe = _need_tool("java", "install openjdk-17-jre-headless (Kafka 4.x needs Java 17+)")
    try:
        out = subprocess.run([exe, "-version"], check=False, capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as e:
        raise InfraError(f"cannot run `{exe} -version`: {e}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m:
        major = int(m[1]) if m[1] != "1" else int(m[2] or 0)
        if major < 17:
            raise InfraError(f"java {major} found at {exe}; Kafka 4.x needs 17+: install openjdk-17-jre-headless")
    return exe


def _kafka_version() -> str:
    try:
        m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    except OSError:
        raise InfraError(f"missing {KAFKA_POM}; restore it from git") from None
    if not m:
        raise InfraError(f"no <kafka.version> in {KAFKA_POM}")
    return m[1].strip()


def _run_mvn(args: list[str], what: str) -> None:
    mvn = _need_tool(
        "mvn",
        "install maven (apt-get install maven); it fetches the jars from Maven Central once",
    )
    cmd = [mvn, "-B", "-q", *args]
    r = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        out = (r.stdout + r.stderr).strip().splitlines()[-30:]
        raise InfraError(
            f"fetching {what} failed (exit {r.returncode}); is Maven Central reachable?\n"
            f"  command: {' '.join(cmd)}\n" + "\n".join("  | " + line for line in out)
        )


def ensure_kafka_jars(p: Paths) -> None:
    version = _kafka_version()
    if (p.kafka_libs / f"kafka_2.13-{version}.jar").is_file():
        return
    say(f"fetching Kafka {version} jars from Maven Central into {p.kafka_libs} (one-time, ~45 MB) ...")
    t0 = time.monotonic()
    partial = p.kafka_libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _run_mvn(
        [
            "-f",
            str(KAFKA_POM),
            f"{MVN_DEP_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={partial}",
        ],
        "Kafka jars",
    )
    if not (partial / f"kafka_2.13-{version}.jar").is_file():
        raise InfraError(f"mvn finished but {partial}/kafka_2.13-{version}.jar is missing")
    shutil.rmtree(p.kafka_libs, ignore_errors=True)  # jars of another version, if any
    os.replace(partial, p.kafka_libs)
    say(f"fetched {len(list(p.kafka_libs.glob('*.jar')))} jars in {time.monotonic() - t0:.1f}s")


def ensure_minio(p: Paths) -> None:
    """MinIO's server binary, built once from the Go module proxy into TOOL_CACHE (kept across clones)."""
    if p.minio_bin.is_file():
        return
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise InfraError("go not found on PATH: install Go 1.24 or newer (MinIO is built from the Go module proxy once)")
    say(f"building MinIO {MINIO_VERSION} from the Go module proxy into {p.minio_bin.parent} (one-time, about 6 minutes) ...")
    t0 = time.monotonic()
    partial = p.minio_bin.parent / "partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    env = dict(os.environ, GOBIN=str(partial), GOFLAGS="-mod=mod", CGO_ENABLED="0")
    r = subprocess.run(
        [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], check=False, cwd=partial, env=env, capture_output=True, text=True
    )
    if r.returncode != 0 or not (partial / "minio").is_file():
        out = (r.stdout + r.stderr).strip().splitlines()[-30:]
        raise InfraError(
            f"building MinIO failed (exit {r.returncode}); is the Go module proxy reachable?\n"
            + "\n".join("  | " + line for line in out)
        )
    os.replace(partial / "minio", p.minio_bin)
    shutil.rmtree(partial, ignore_errors=True)
    say(f"built MinIO in {time.monotonic() - t0:.0f}s")


def require_python_deps(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise InfraError(
            f"python package(s) {', '.join(missing)} missing in {sys.executable}: run infra with "
            f"{REPO / '.venv/bin/python'} (the infra/up wrapper does; create the venv with `make venv`)"
        )
