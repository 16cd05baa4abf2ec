"""Local secrets stay local (security review F5).

Everything ``infra/up`` keeps under ``.infra/`` (the S3 server's configuration and data, the broker's
config, SCRAM passwords, TLS keys, log segments, the client properties and ``.infra/env``) is for root
alone: directories 0700, files without group or other bits. The browser worker's Chromium runs as an
unprivileged local user; it must not be able to read the S3 secret or the topics' bytes.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / ".infra"
PRIVATE = ("env", "ports.json", "kafka", "minio", "s3", "tls", "clients")
"""What infra keeps (made only by infra/up and the services it starts); caches of jars and tools are not secrets
but are made private too."""


def test_every_secret_and_data_directory_under_infra_is_private(services: Any) -> None:
    walked = 0
    exposed: list[str] = []
    for name in PRIVATE:
        top = STATE / name
        if not top.exists():
            continue
        for path in (top, *top.rglob("*")):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # a segment or log rolled away while walking
            if stat.S_ISLNK(st.st_mode):
                continue
            walked += 1
            if st.st_mode & 0o077:
                exposed.append(f"{path.relative_to(REPO)} {stat.filemode(st.st_mode)}")
    assert walked > 20  # the broker's data directory alone holds more
    assert (STATE / "env").exists() and not (STATE / "env").stat().st_mode & 0o077
    assert exposed == [], "\n".join(exposed)
