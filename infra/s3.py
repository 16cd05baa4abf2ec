"""The S3 store: the local MinIO (started with a random root credential, a versioned bucket with Object Lock,
one identity per use with its policy) or an external endpoint's plain bucket (minio, imported lazily)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import time
import urllib.parse
from pathlib import Path
from typing import Any, Final

from infra.base import POLL_S, InfraError, atomic_write, say
from infra.paths import Paths
from infra.processes import Service, tail
from infra.tools import ensure_minio

DEFAULT_BUCKET = "bernstein-cas"
S3_REGION = "us-east-1"

S3_LOCK_MODE = os.environ.get("BERNSTEIN_S3_LOCK_MODE", "COMPLIANCE").strip().upper()
"""The bucket's default Object Lock mode: COMPLIANCE (no one, not even MinIO's root, deletes or shortens a locked
version) or GOVERNANCE (a principal granted s3:BypassGovernanceRetention can)."""
S3_LOCK_DAYS = os.environ.get("BERNSTEIN_S3_LOCK_DAYS", "1").strip()
"""How long every new object version is locked by default, in days: 1 for a local test store; a deployment sets
what its retention policy says (docs/operations.md)."""

S3_IDENTITIES: Final = ("producer", "reader", "ops")
"""The S3 identities infra makes on its MinIO, each with the policy of ``s3_policy``; ``.infra/env`` names ops."""


def s3_policy(name: str, bucket: str) -> dict[str, Any]:
    """What each identity may do. A producer puts and gets blobs (no delete, no listing: it cannot see what
    others stored); the verifier and export read blobs and their versions (a poisoned address keeps the
    true bytes as an older version); ops may do anything with buckets, nothing with identities."""
    objects = f"arn:aws:s3:::{bucket}/sha256/*"
    statements: dict[str, list[dict[str, Any]]] = {
        "producer": [{"Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"], "Resource": [objects]}],
        "reader": [
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"], "Resource": [objects]},
            {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketVersions"], "Resource": [f"arn:aws:s3:::{bucket}"]},
        ],
        "ops": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}],
    }
    return {"Version": "2012-10-17", "Statement": statements[name]}


def s3_root_credentials(p: Paths) -> tuple[str, str]:
    """MinIO's root user and password: made at random on the first start (0600); never in .infra/env."""
    try:
        data = json.loads(p.s3_root.read_text())
        return str(data["user"]), str(data["password"])
    except (OSError, ValueError, KeyError, TypeError):
        user, password = "bernstein-root", secrets.token_urlsafe(24)
        atomic_write(p.s3_root, json.dumps({"user": user, "password": password}) + "\n", mode=0o600)
        return user, password


def start_s3(p: Paths, svc: Service, port: int) -> int:
    ensure_minio(p)
    p.s3data.mkdir(parents=True, exist_ok=True)
    atomic_write(p.s3_port, f"{port}\n")
    user, password = s3_root_credentials(p)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(p.s3),
        "MINIO_ROOT_USER": user,
        "MINIO_ROOT_PASSWORD": password,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_CI_CD": "1",
    }
    argv = [str(p.minio_bin), "server", "--quiet", "--address", f"127.0.0.1:{port}", str(p.s3data)]
    pid = svc.spawn(argv, env=env)
    say(f"s3: started MinIO pid {pid} on http://127.0.0.1:{port} (log {p.s3_log})")
    return pid


def _s3_probe(endpoint: str, timeout: float = 1.0) -> bool:
    u = urllib.parse.urlsplit(endpoint)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(
        u.hostname or "127.0.0.1",
        u.port or (443 if u.scheme == "https" else 80),
        timeout=timeout,
    )
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True  # any HTTP answer (403 for an unsigned request) means it serves
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_s3(endpoint: str, deadline: float, svc: Service | None = None, pid: int | None = None) -> float:
    t0 = time.monotonic()
    while True:
        if svc is not None and pid is not None and not svc.alive(pid):
            raise InfraError(f"s3: MinIO pid {pid} exited during startup; last lines of {svc.log}:\n{tail(svc.log)}")
        if _s3_probe(endpoint):
            return time.monotonic() - t0
        if time.monotonic() >= deadline:
            if svc is not None:
                raise InfraError(f"s3: not ready after {time.monotonic() - t0:.0f}s; last lines of {svc.log}:\n{tail(svc.log)}")
            raise InfraError(
                f"s3: external endpoint BERNSTEIN_S3_ENDPOINT={endpoint} not reachable after "
                f"{time.monotonic() - t0:.0f}s; start it, or unset the variable to use the local MinIO"
            )
        time.sleep(POLL_S)


def _s3_client(endpoint: str, access: str, secret: str) -> Any:
    try:
        from minio import Minio
    except ImportError:
        raise InfraError(
            "python package minio missing: run infra with .venv/bin/python "
            "(use the infra/up wrapper; create the venv with `make venv`)"
        ) from None
    u = urllib.parse.urlsplit(endpoint)
    return Minio(u.netloc, access_key=access, secret_key=secret, secure=u.scheme == "https", region=S3_REGION)


def ensure_locked_bucket(endpoint: str, root: tuple[str, str], bucket: str) -> None:
    """The local MinIO's bucket: versioned, with Object Lock and a default retention (S3_LOCK_MODE, S3_LOCK_DAYS).
    A locked version cannot be deleted or overwritten; a put under its key only adds a version."""
    import urllib3
    from minio.error import S3Error
    from minio.objectlockconfig import DAYS, ObjectLockConfig

    if S3_LOCK_MODE not in ("COMPLIANCE", "GOVERNANCE") or not S3_LOCK_DAYS.isdigit() or int(S3_LOCK_DAYS) < 1:
        raise InfraError(
            f"BERNSTEIN_S3_LOCK_MODE={S3_LOCK_MODE!r} / BERNSTEIN_S3_LOCK_DAYS={S3_LOCK_DAYS!r}: the mode is COMPLIANCE or "
            "GOVERNANCE, the days a whole number of at least 1"
        )
    client = _s3_client(endpoint, *root)
    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket, object_lock=True)
            say(f"s3: created bucket {bucket} (versioned, Object Lock)")
        client.set_object_lock_config(bucket, ObjectLockConfig(S3_LOCK_MODE, int(S3_LOCK_DAYS), DAYS))
    except S3Error as e:
        raise InfraError(
            f"s3: bucket {bucket!r} with Object Lock failed at {endpoint}: {e.code}: {e.message}; a bucket made without "
            f"Object Lock cannot get it later: `infra/reset` starts the local store afresh"
        ) from None
    except (OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot talk to {endpoint}: {e}") from None


def ensure_s3_identities(p: Paths, endpoint: str, root: tuple[str, str], bucket: str) -> dict[str, tuple[str, str]]:
    """The local MinIO's identities (S3_IDENTITIES) with their policies, each written to .infra/s3/<name>.env (0600);
    their secrets are made once and kept. Returns name -> (access key, secret key)."""
    import urllib3
    from minio.credentials.providers import StaticProvider
    from minio.error import MinioAdminException
    from minio.minioadmin import MinioAdmin

    u = urllib.parse.urlsplit(endpoint)
    admin = MinioAdmin(endpoint=u.netloc, credentials=StaticProvider(*root), secure=u.scheme == "https", region=S3_REGION)
    made: dict[str, tuple[str, str]] = {}
    try:
        for name in S3_IDENTITIES:
            path = p.s3_identities / f"{name}.env"
            known = _read_env_file(path)
            access = f"bernstein-{name}"
            secret = known.get("BERNSTEIN_S3_SECRET_KEY") or secrets.token_urlsafe(24)
            admin.policy_add(f"bernstein-{name}", policy=s3_policy(name, bucket))
            admin.user_add(access, secret)
            admin.policy_set(f"bernstein-{name}", user=access)
            atomic_write(
                path,
                f"BERNSTEIN_S3_ENDPOINT={endpoint}\nBERNSTEIN_S3_ACCESS_KEY={access}\nBERNSTEIN_S3_SECRET_KEY={secret}\n"
                f"BERNSTEIN_S3_BUCKET={bucket}\n",
                mode=0o600,
            )
            made[name] = (access, secret)
    except (MinioAdminException, OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot set up the S3 identities at {endpoint}: {e}") from None
    return made


def _read_env_file(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError):
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {}


def ensure_bucket(endpoint: str, access: str, secret: str, bucket: str) -> None:
    """An external store's bucket, made plain when missing (its owner decides versioning and Object Lock)."""
    client = _s3_client(endpoint, access, secret)
    import urllib3
    from minio.error import S3Error

    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket)
            say(f"s3: created bucket {bucket}")
    except S3Error as e:
        raise InfraError(
            f"s3: bucket {bucket!r} check/create failed at {endpoint}: {e.code}: {e.message}; "
            "check BERNSTEIN_S3_ACCESS_KEY / BERNSTEIN_S3_SECRET_KEY"
        ) from None
    except (OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot talk to {endpoint}: {e}") from None
