"""Which Kafka principal an in-process client or a ``bernstein`` subprocess runs as (the end-to-end tests of producer identity).

On a secured broker (``infra/up --secure``) every component has its own principal: the tests'
in-process clients are the admin, ``tests.conftest.as_component`` gives a subprocess its
component's principal. ``producer_principal`` does the same for a producer's in-process clients
(the emitter SDK), so that a producer host's submissions go through the broker under the
producer principal's ACLs. On a plaintext broker both leave everything as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bernstein.substrate.cas import S3BlobStore, S3Settings
from tests.conftest import _read_env, as_component

S3_IDENTITIES = Path(__file__).resolve().parents[2] / ".infra" / "s3"
"""infra/up's S3 identities of its MinIO, one env file each (producer, reader, ops)."""


def s3_identity(name: str) -> dict[str, str]:
    """infra/up's S3 identity ``name`` as its BERNSTEIN_S3_ACCESS_KEY and BERNSTEIN_S3_SECRET_KEY."""
    path = S3_IDENTITIES / f"{name}.env"
    assert path.is_file(), f"{path} is missing: infra/up makes one env file per S3 identity of its MinIO"
    values = _read_env(path)
    return {k: values[k] for k in ("BERNSTEIN_S3_ACCESS_KEY", "BERNSTEIN_S3_SECRET_KEY")}


def store_as(name: str, services: Any) -> S3BlobStore:
    """The CAS as S3 identity ``name`` sees it."""
    creds = s3_identity(name)
    return S3BlobStore(
        S3Settings(services.s3.endpoint, creds["BERNSTEIN_S3_ACCESS_KEY"], creds["BERNSTEIN_S3_SECRET_KEY"], services.s3.bucket)
    )


CONFIG_FILE = "BERNSTEIN_KAFKA_CONFIG_FILE"


def secure(services: Any) -> bool:
    """True when the test session's broker is the secured one (SASL_SSL with ACLs)."""
    return bool(getattr(services, "secure", False))


@contextmanager
def producer_principal(services: Any) -> Iterator[None]:
    """Kafka clients created inside authenticate as the producer principal (on a secured broker)."""
    if not secure(services):
        yield
        return
    saved = os.environ.get(CONFIG_FILE)
    os.environ[CONFIG_FILE] = str(services.principal_file("producer"))
    try:
        yield
    finally:
        if saved is None:
            del os.environ[CONFIG_FILE]
        else:
            os.environ[CONFIG_FILE] = saved


def component_env(args: Sequence[str], env: dict[str, str]) -> dict[str, str]:
    """``env`` for ``bernstein ARGS`` started without ``tests.support.tamper.bernstein`` (a long-running ``Popen``): the
    component's own principal on a secured broker (``tests.conftest.as_component``), else ``env``."""
    return as_component(args, env)
