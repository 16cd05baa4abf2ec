"""Isolated profiles: distinct sessions always get disjoint directories under the worktree."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bernstein.producers.computer_use import isolated_profile_dir
from bernstein.producers.computer_use.profiles import prepare_profile

WORKTREE = Path("/tmp/worktree")


def test_profiles_live_under_the_worktree() -> None:
    path = isolated_profile_dir("browser-0", worktree=WORKTREE)
    assert path.parent == WORKTREE / ".bernstein" / "computer-use" / "profiles"
    assert path.name.startswith("browser-0-") and len(path.name) == len("browser-0-") + 16


def test_ids_that_sanitise_alike_get_disjoint_directories() -> None:
    ids = ["a.b", "a_b", "a:b", "a@b", "a/b", "a b", "a\\b"]
    paths = {isolated_profile_dir(i, worktree=WORKTREE) for i in ids}
    assert len(paths) == len(ids)
    assert {p.name.rsplit("-", 1)[0] for p in paths} == {"a_b"}  # the readable prefix alone would collide


def test_the_same_session_id_in_two_runs_is_two_profiles() -> None:
    assert isolated_profile_dir("s", worktree=WORKTREE, run_id="r1") != isolated_profile_dir("s", worktree=WORKTREE, run_id="r2")


def test_hostile_ids_stay_inside_the_profiles_directory() -> None:
    for session_id in ("../../etc", "..", "/abs/path", "", "x" * 500):
        path = isolated_profile_dir(session_id, worktree=WORKTREE)
        assert path.parent == WORKTREE / ".bernstein" / "computer-use" / "profiles"
        assert len(path.name) <= 40 + 1 + 16


@given(st.text(min_size=0, max_size=40), st.text(min_size=0, max_size=40))
def test_distinct_ids_never_share_a_directory(a: str, b: str) -> None:
    if a != b:
        assert isolated_profile_dir(a, worktree=WORKTREE) != isolated_profile_dir(b, worktree=WORKTREE)
    else:
        assert isolated_profile_dir(a, worktree=WORKTREE) == isolated_profile_dir(b, worktree=WORKTREE)


def test_prepare_creates_a_private_directory(tmp_path: Path) -> None:
    path = prepare_profile("browser-0", worktree=tmp_path)
    assert path.is_dir() and (path.stat().st_mode & 0o777) == 0o700
