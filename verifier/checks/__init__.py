"""Modality checks, by activity kind.

Each modality module registers one check here; the verifier runs it for every
``activity.result`` entry of that kind after the generic checks (evidence set,
observation bytes, artifact bytes) have run.
"""

from __future__ import annotations

from bernstein.verifier.checks.base import CheckContext, DetailLine, ModalityCheck, ModalityVerdict

REGISTRY: dict[str, ModalityCheck] = {}


def register(kind: str, check: ModalityCheck) -> None:
    REGISTRY[kind] = check


def check_for(kind: str) -> ModalityCheck | None:
    _load_builtin_checks()
    return REGISTRY.get(kind)


_loaded = False


def _load_builtin_checks() -> None:
    """Import the modality check modules (each calls ``register``) once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib

    for module in (
        "bernstein.verifier.checks.research",
        "bernstein.verifier.checks.dataops",
        "bernstein.verifier.checks.browser",
    ):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


__all__ = ["CheckContext", "DetailLine", "ModalityCheck", "ModalityVerdict", "REGISTRY", "register", "check_for"]
