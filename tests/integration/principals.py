"""Which Kafka principal an in-process client or a ``bernstein`` subprocess runs as (issue 12 end-to-end tests).

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
from typing import Any

from tests.conftest import as_component

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
    """``env`` for ``bernstein ARGS`` started without ``tamper_kit.bernstein`` (a long-running ``Popen``): the
    component's own principal on a secured broker (``tests.conftest.as_component``), else ``env``."""
    return as_component(args, env)
