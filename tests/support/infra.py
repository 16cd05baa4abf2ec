"""Load infra/infra.py (a script, not a package) as a module for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

INFRA_SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "infra.py"


def load_infra() -> ModuleType:
    if (loaded := sys.modules.get("bernstein_infra")) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("bernstein_infra", INFRA_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bernstein_infra"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["bernstein_infra"]
        raise
    return module
