"""Re-export of the data/ops receipt verification from ``verifier.dataops_receipts`` (where verification lives)."""

from __future__ import annotations

from verifier.dataops_receipts import *  # noqa: F403
from verifier.dataops_receipts import __all__ as __all__
