"""The package installs like a library.

* without ``bernstein_native`` (no Rust toolchain) the scheduler runs the Python core and says so,
  the verifier reads facts with the Python reference and verifies the same dump with the same report;
* without Playwright every module but the browser driver imports, and ``bernstein browser run`` is a
  typed error naming the ``browser`` extra, no traceback;
* neither is a dependency of the published package; both stay in the dev environment (uv.lock);
* every locked package has a wheel for CPython 3.11 and 3.13 on manylinux x86_64 (the two tested versions), but
  the pure-Python sdists listed in ``PURE_PYTHON_SDISTS`` (the archive extra's ``surt``: no compiler needed);
* every shipped package carries ``py.typed``.

"Absent" is simulated in a fresh interpreter whose first meta path finder raises
``ModuleNotFoundError`` for the blocked top-level names, exactly what a missing install raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

import bernstein.consumers.core.native as native_module
from bernstein.commands.common import without_endpoint_line
from bernstein.commands.scheduler import startup_report
from bernstein.consumers.core.native import NATIVE_LABEL, NativeSchedulerCore, NativeUnavailable, choose_core, make_core
from bernstein.consumers.core.step import SchedulerCore

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SHIPPED = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
NOT_INSTALLED = "python reference (bernstein-native not installed: pip install ./native from a checkout, needs Rust >= 1.85; `make venv` builds it)"
EXTRA_MESSAGE = (
    "bernstein: error: the browser modality needs Playwright (playwright is not installed): "
    "pip install 'bernstein-journal[browser]' (it drives Debian's Chromium, see docs/computer_use.md)"
)


def run_without(blocked: tuple[str, ...], body: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter where importing any of ``blocked`` fails as if not installed."""
    prelude = textwrap.dedent(
        f"""
        import importlib.abc, sys
        BLOCKED = {blocked!r}
        assert not any(name.split(".")[0] in BLOCKED for name in sys.modules), "imported before the block"

        class _NotInstalled(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, _NotInstalled())
        sys.path.insert(0, {str(REPO)!r})
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


# ---------------------------------------------------------------------------
# the Rust core is optional
# ---------------------------------------------------------------------------


def _config(tmp_path: Path) -> Any:
    from bernstein.commands.scheduler import scheduler_config
    from bernstein.substrate.keys import init_keys

    roles = tmp_path / "roles.toml"
    roles.write_text('[[roles]]\nrole = "developer"\n', encoding="utf-8")
    return scheduler_config(init_keys(tmp_path / "keys"), roles, 2)


def test_auto_runs_the_native_core_here_and_says_so(tmp_path: Path) -> None:
    config = _config(tmp_path)
    core, label = choose_core(config, 0)
    assert isinstance(core, NativeSchedulerCore) and label == NATIVE_LABEL == "native (bernstein_native, Rust)"
    core, label = choose_core(config, 0, "native", environ={"BERNSTEIN_CORE": "python"})  # the environment wins
    assert type(core) is SchedulerCore and label == "python reference"
    assert startup_report(config, core, tmp_path / "roles.toml", label)[2] == "core: python reference"


def test_without_the_extension_auto_falls_back_to_python_and_the_log_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    monkeypatch.setattr(native_module, "_native", None)
    core, label = choose_core(config, 0)
    assert type(core) is SchedulerCore
    assert label == NOT_INSTALLED
    assert type(make_core(config, 0, environ={"BERNSTEIN_CORE": "auto"})) is SchedulerCore
    with pytest.raises(NativeUnavailable, match="the bernstein_native extension is not installed"):
        choose_core(config, 0, "native")
    assert startup_report(config, core, tmp_path / "roles.toml", label)[2] == f"core: {NOT_INSTALLED}"


def test_an_extension_out_of_step_with_the_tree_falls_back_naming_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    monkeypatch.setattr(native_module, "_constant_mismatches", lambda: ["MAX_OBSERVATIONS: native 1, Python 2"])
    core, label = choose_core(config, 0)
    assert type(core) is SchedulerCore
    assert label == "python reference (bernstein_native is out of step with this tree: MAX_OBSERVATIONS: native 1, Python 2)"


def test_without_bernstein_native_a_dump_verifies_with_the_python_core_and_the_same_report(tmp_path: Path) -> None:
    """A fresh interpreter where ``import bernstein_native`` fails: the module imports, every fallback is taken,
    and the dump the dev environment (Rust core) wrote verifies with exit 0 and a byte-identical report."""
    # the dump, written here with the native core
    made = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "offline_dump.py"), str(tmp_path / "made")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    run_id = made.stdout.split()[0]
    verify_args = [
        run_id,
        "--from",
        str(tmp_path / "made" / "dump"),
        "--trusted-keys",
        str(tmp_path / "made" / "trusted-keys.json"),
    ]
    body = """
        import contextlib, io, json, sys
        from bernstein.consumers.core import native
        from bernstein.verifier import facts
        from bernstein.cli import main
        ok, why = native.native_status()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["activity", "verify", *sys.argv[1:]])
        print(json.dumps({"ok": ok, "why": why, "native": native._native is None, "facts": facts.current().name,
                          "NATIVE": facts.NATIVE is None, "code": code, "report": out.getvalue(),
                          "loaded": "bernstein_native" in sys.modules}))
    """
    without = run_without(("bernstein_native",), body, *verify_args)
    assert without.returncode == 0, without.stderr
    got = json.loads(without.stdout)
    assert got["ok"] is False and got["why"] == (
        "the bernstein_native extension is not installed (No module named 'bernstein_native')"
    )
    assert (got["native"], got["facts"], got["NATIVE"], got["loaded"]) == (True, "python", True, False)
    assert got["code"] == 0, got["report"]
    assert got["report"].endswith("verified -- every activity reconstructs from the journal.\n")
    with_native = run_without((), body, *verify_args)
    assert json.loads(with_native.stdout)["facts"] == "native"
    assert json.loads(with_native.stdout)["report"] == got["report"]


def test_without_bernstein_native_the_offline_pipeline_writes_the_same_journal(tmp_path: Path) -> None:
    """The scheduler's Python core (the fallback) writes a dump that verifies, from the shipped modules alone."""
    body = """
        import sys
        from pathlib import Path
        from bernstein.consumers.core import native
        from bernstein.cli import main
        sys.path.insert(0, "scripts")
        import offline_dump
        assert native._native is None
        run, dump, trusted = offline_dump.write_dump(Path(sys.argv[1]))
        sys.exit(main(["activity", "verify", run, "--from", str(dump), "--trusted-keys", str(trusted)]))
    """
    done = run_without(("bernstein_native",), body, str(tmp_path / "py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.endswith("verified -- every activity reconstructs from the journal.\n")


# ---------------------------------------------------------------------------
# Playwright is the browser extra
# ---------------------------------------------------------------------------


def shipped_modules() -> list[str]:
    names: list[str] = []
    for package in SHIPPED:
        # os.walk follows bernstein/'s links to the component folders, as the wheel build does
        found = [Path(d, f) for d, _, fs in os.walk(REPO / package, followlinks=True) for f in fs if f.endswith(".py")]
        for path in sorted(found):
            parts = path.relative_to(REPO).with_suffix("").parts
            if {"go", "typescript", "vectors"} & set(parts):
                continue  # not in the wheel (pyproject's exclude)
            if parts[-1] == "__main__":
                continue  # running it is not importing it
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


BROWSER_DRIVER = "bernstein.producers.computer_use.playwright_driver"


def test_every_module_but_the_browser_driver_imports_without_playwright_or_the_native_core() -> None:
    modules = [m for m in shipped_modules() if m != BROWSER_DRIVER]
    assert len(modules) > 80 and "bernstein.verifier.verify" in modules and "bernstein.cli" in modules
    body = """
        import importlib, json, sys
        failed = {}
        for name in sys.argv[1:]:
            try:
                importlib.import_module(name)
            except Exception as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
        try:
            importlib.import_module("bernstein.producers.computer_use.playwright_driver")
            driver = "imported"
        except Exception as exc:
            driver = f"{type(exc).__name__} {getattr(exc, 'code', '')}: {exc}"
        print(json.dumps({"failed": failed, "driver": driver,
                          "leaked": sorted(m for m in sys.modules if m.split(".")[0] in ("playwright", "bernstein_native"))}))
    """
    done = run_without(("playwright", "bernstein_native"), body, *modules)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["failed"] == {}
    assert got["leaked"] == []
    assert got["driver"] == (
        "BrowserExtraMissing E_BROWSER_EXTRA_MISSING: the browser modality needs Playwright (playwright is not installed): "
        "pip install 'bernstein-journal[browser]' (it drives Debian's Chromium, see docs/computer_use.md)"
    )


def test_browser_run_without_playwright_is_a_typed_error_naming_the_extra(tmp_path: Path) -> None:
    flow = tmp_path / "flow.json"
    flow.write_text("[]", encoding="utf-8")
    body = """
        import sys
        from bernstein.cli import main
        sys.exit(main(sys.argv[1:]))
    """
    args = ("browser", "run", "--flow", str(flow), "--url", "https://example.org/", "--run", "r", "--session", "s")
    done = run_without(("playwright",), body, *args, cwd=tmp_path)
    assert (done.returncode, done.stdout, without_endpoint_line(done.stderr)) == (3, "", EXTRA_MESSAGE + "\n")
    # the rest of the CLI is there: help lists the browser commands without importing Playwright
    listed = run_without(("playwright",), body, "browser", "--help", cwd=tmp_path)
    assert listed.returncode == 0 and "run" in listed.stdout and "Traceback" not in listed.stderr


# ---------------------------------------------------------------------------
# metadata: dependencies, extras, lock, py.typed
# ---------------------------------------------------------------------------


def test_the_package_depends_on_neither_rust_nor_playwright_and_the_dev_group_keeps_both() -> None:
    project = PYPROJECT["project"]
    names = [d.split("=")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert "bernstein-native" not in names and "playwright" not in names
    assert all("==" in d for d in project["dependencies"]), "runtime dependencies are pinned"
    extras = project["optional-dependencies"]
    assert extras["browser"] == ["playwright==1.65.2"] and extras["mcp"] == ["mcp==2.3.0"]
    assert extras["archive"] == ["warcio==1.8.1", "wacz==0.6.0"]
    assert all("==" in d for pins in extras.values() for d in pins), "extras are pinned"
    dev = PYPROJECT["dependency-groups"]["dev"]
    assert "bernstein-native" in dev and "playwright==1.65.2" in dev and "mcp==2.3.0" in dev  # same pins as the extras
    assert {"warcio==1.8.1", "wacz==0.6.0"} <= set(dev)
    assert PYPROJECT["tool"]["uv"]["sources"]["bernstein-native"] == {"path": "native"}
    assert project["requires-python"] == ">=3.11,<3.14"


def _wheel_tags(python: tuple[int, int]) -> set[Tag]:
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64"]
    platforms += ["manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_26_x86_64", "linux_x86_64"]
    return set(cpython_tags(python, platforms=platforms)) | set(compatible_tags(python, platforms=platforms))


def _windows_only(lock: dict[str, object], name: str) -> bool:
    """Whether every locked dependency on ``name`` is marked for Windows only (``mcp``'s ``pywin32``)."""
    uses = [d for p in lock["package"] for d in p.get("dependencies", []) if d["name"] == name]  # type: ignore[attr-defined]
    return bool(uses) and all("sys_platform == 'win32'" in d.get("marker", "") for d in uses)


PURE_PYTHON_SDISTS = frozenset({"surt"})
"""Locked packages published as a source distribution only, pure Python (a setuptools build, no compiler): ``surt``
(2019), under the archive extra's py-wacz (wacz -> cdxj-indexer -> surt). The base package needs none of them."""


@pytest.mark.parametrize("python", [(3, 11), (3, 13)])
def test_every_locked_package_has_a_wheel_for_the_tested_pythons(python: tuple[int, int]) -> None:
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    assert lock["requires-python"] == ">=3.11, <3.14"
    supported = _wheel_tags(python)
    registry = [p for p in lock["package"] if "registry" in p.get("source", {}) and not _windows_only(lock, p["name"])]
    pure = [p for p in registry if p["name"] in PURE_PYTHON_SDISTS]
    assert [p["name"] for p in pure] == sorted(PURE_PYTHON_SDISTS) and all("sdist" in p for p in pure)
    registry = [p for p in registry if p["name"] not in PURE_PYTHON_SDISTS]
    assert len(registry) >= 30
    missing = []
    for package in registry:
        tags = {t for w in package.get("wheels", []) for t in parse_wheel_filename(w["url"].rsplit("/", 1)[1])[3]}
        if not tags & supported:
            missing.append(f"{package['name']}=={package['version']}")
    assert missing == [], f"no CPython {python[0]}.{python[1]} manylinux x86_64 wheel in uv.lock"


def test_every_shipped_package_has_py_typed() -> None:
    assert SHIPPED == ["bernstein"]  # the one import name (docs/decisions.md, "One import name")
    assert (REPO / "bernstein" / "py.typed").is_file()
    components = ["schemas", "substrate", "producers", "consumers", "verifier"]
    assert [c for c in components if (REPO / "bernstein" / c).resolve() != REPO / c] == []
