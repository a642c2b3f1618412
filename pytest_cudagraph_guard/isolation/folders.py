"""The parent session's folder for its test processes (:mod:`.pool`'s): owner-only, one folder per
test inside, and swept by the next session when the session that made it was killed."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Final

from .wire import SESSION_FOLDER_PREFIX

OWNER_FILE: Final = "owner.pid"


class SessionFolder:
    """Made when first needed, removed by :meth:`close`. A test's folder inside it (its
    request, its output, its basetemp) lives as long as the test's process: it goes once the
    parent has read it and the process has ended."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._count = 0
        self._ending: dict[int, Path] = {}  # folders read, by the pid of their ending process

    @property
    def path(self) -> Path:
        if self._path is None:
            _remove_folders_of_dead_sessions()
            self._path = Path(tempfile.mkdtemp(prefix=SESSION_FOLDER_PREFIX))
            (self._path / OWNER_FILE).write_text(str(os.getpid()))
        return self._path

    def new_test_folder(self) -> Path:
        """An owner-only folder for one test's request and output files."""
        self._count += 1
        folder = self.path / f"test-{self._count}"
        folder.mkdir(mode=0o700)
        return folder

    def release(self, folder: Path, pid: int, *, ending: bool) -> None:
        """``folder`` has been read: it goes now, or, where its process ``pid`` is still
        ``ending``, once it has ended."""
        if ending:
            self._ending[pid] = folder
        else:
            shutil.rmtree(folder, ignore_errors=True)

    def ended(self, pids: Iterable[int]) -> None:
        """Processes ``pids`` have ended: the folders released before go."""
        for pid in pids:
            folder = self._ending.pop(pid, None)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self._ending.clear()
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


def owner_only(path: Path, mode: str) -> IO[Any]:
    """A new file at ``path`` that only its owner can read, opened for writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, mode)


def _remove_folders_of_dead_sessions() -> None:
    """What a session killed with SIGKILL left behind, since nobody was left to remove it."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SESSION_FOLDER_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
            mine = folder.stat().st_uid == os.getuid()
        except (OSError, ValueError):
            continue
        if mine and not _process_exists(owner):
            shutil.rmtree(folder, ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
