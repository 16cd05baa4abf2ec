"""The local services' ports: chosen free once, kept in .infra/ports.json (or recovered from the generated
configs), and the bootstrap and quorum strings of the three-node cluster made from them."""

from __future__ import annotations

import contextlib
import errno
import json
import re
import socket

from infra.base import CLUSTER_NODES, atomic_write
from infra.paths import Paths


def _port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR like the JVM: TIME_WAIT leftovers of our own last run do not count
        # as "taken"; a live listener still makes bind fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        s.close()


def _free_ports(n: int, exclude: set[int]) -> list[int]:
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)  # keep bound until all are chosen so they are distinct
            port = s.getsockname()[1]
            if port not in exclude:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def node_port_keys(n: int) -> tuple[str, str]:
    """The ports.json keys of cluster node ``n``: its client listener and its controller listener."""
    return f"kafka{n}", f"controller{n}"


PORT_KEYS = ("kafka", "controller", "s3", *(key for n in CLUSTER_NODES for key in node_port_keys(n)))


def load_ports(p: Paths) -> dict[str, int]:
    try:
        data = json.loads(p.ports.read_text())
        return {k: int(data[k]) for k in PORT_KEYS if k in data}
    except (OSError, ValueError, TypeError):
        pass
    # Fallback: recover from generated configs (e.g. ports.json deleted by hand).
    ports: dict[str, int] = {}
    with contextlib.suppress(OSError):
        text = p.server_props.read_text()
        if m := re.search(
            r"^listeners=(?:PLAINTEXT|SASL_SSL)://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)",
            text,
            re.MULTILINE,
        ):
            ports["kafka"], ports["controller"] = int(m[1]), int(m[2])
    for n in CLUSTER_NODES:
        with contextlib.suppress(OSError):
            if m := re.search(
                r"^listeners=(?:PLAINTEXT|SASL_SSL)://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)",
                p.node(n).server_props.read_text(),
                re.MULTILINE,
            ):
                kafka, controller = node_port_keys(n)
                ports[kafka], ports[controller] = int(m[1]), int(m[2])
    with contextlib.suppress(OSError, ValueError):
        ports["s3"] = int(p.s3_port.read_text().strip())
    return ports


def save_ports(p: Paths, ports: dict[str, int]) -> None:
    atomic_write(p.ports, json.dumps(ports, indent=2, sort_keys=True) + "\n")


def cluster_voters(ports: dict[str, int]) -> str:
    """controller.quorum.voters of the three-node cluster: ``1@127.0.0.1:<port>,2@...,3@...``."""
    return ",".join(f"{n}@127.0.0.1:{ports[node_port_keys(n)[1]]}" for n in CLUSTER_NODES)


def cluster_bootstrap(ports: dict[str, int]) -> str:
    """The three nodes' client listeners, as BERNSTEIN_KAFKA_BOOTSTRAP lists them."""
    return ",".join(f"127.0.0.1:{ports[node_port_keys(n)[0]]}" for n in CLUSTER_NODES)
