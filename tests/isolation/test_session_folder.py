"""The session folder's clean-up of what killed sessions left, with no session: a folder whose
owner is gone is removed, one whose owner lives (or that names none) stays."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation import folders
from pytest_cudagraph_guard.isolation.wire import SESSION_FOLDER_PREFIX


def _no_such_pid() -> int:
    """A pid no process can have: above the kernel's largest."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_killed_sessions_folder_goes_and_a_live_ones_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    owners = {"dead": _no_such_pid(), "alive": os.getpid(), "unnamed": None}
    for name, owner in owners.items():
        folder = tmp_path / f"{SESSION_FOLDER_PREFIX}{name}"
        folder.mkdir()
        if owner is not None:
            (folder / folders.OWNER_FILE).write_text(str(owner))
    folders._remove_folders_of_dead_sessions()
    left = sorted(p.name.removeprefix(SESSION_FOLDER_PREFIX) for p in tmp_path.iterdir())
    assert left == ["alive", "unnamed"]


def test_a_process_exists_while_it_can_be_signalled() -> None:
    assert folders._process_exists(os.getpid())
    assert not folders._process_exists(_no_such_pid())
