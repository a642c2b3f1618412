"""How a test process ends: what it notes for the zygote of the modules the next test process
will need, and the exit code it says on the zygote's pipe once its last result is written.
Called by :mod:`.child`."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import pytest

from .cuda import cuda_use
from .preloads import Timings, installed_plugin_modules, modules_for_a_zygote, note_needed_modules
from .wire import frame


class Ending:
    """What a test process does once its last result is written: it notes the modules the next
    test process will need and says its exit code to the zygote, once. A process whose test
    finished does so as its session starts to finish, so that the next test need not wait for
    the session's end (its ``pytest_sessionfinish`` and ``pytest_unconfigure`` hooks); it notes
    the modules again as it ends, with what that end imported."""

    def __init__(self, present: frozenset[str], done: int | None) -> None:
        self.born = time.monotonic()
        self.set_up_s: float | None = None  # from its start to its test's, less a spare's wait
        self.test_started: float | None = None
        self.present = present  # the modules the process started with
        self.collecting: frozenset[str] | None = None  # those loaded as its collection began
        self.finished: frozenset[str] | None = None  # those loaded once its test finished
        self.done = done  # the zygote's pipe; None in a spawned interpreter
        self.said = False

    def note_modules(self, request_path: Path | None, config: pytest.Config | None) -> None:
        """Notes, beside the test's request at ``request_path``, what the next test process
        will need; ``config``: the session's, once it has one."""
        if request_path is None:
            return
        plugins = installed_plugin_modules(config) if config else set()
        loaded = [name for name in list(sys.modules) if name not in self.present]
        project = config.rootpath if config else None
        needed = modules_for_a_zygote(loaded, plugins, self._outside_the_test(loaded), project)
        note_needed_modules(request_path.parent, needed, cuda_use(), self._timings())

    def set_up(self, waited_s: float) -> None:
        """Its collection is done: its test starts; ``waited_s``: how long a spare waited
        for its test meanwhile, which is not its set-up."""
        self.test_started = time.monotonic()
        self.set_up_s = self.test_started - self.born - waited_s

    def _timings(self) -> Timings | None:
        if self.set_up_s is None or self.test_started is None:
            return None
        return {"set_up_s": self.set_up_s, "test_s": time.monotonic() - self.test_started}

    def _outside_the_test(self, loaded: list[str]) -> set[str]:
        """Of ``loaded``, what the session imported before its collection began (its plugins,
        its conftests) and after its test finished (its plugins' ends)."""
        before = self.collecting if self.collecting is not None else frozenset(loaded)
        after = self.finished if self.finished is not None else frozenset(loaded)
        return {name for name in loaded if name in before or name not in after}

    def say_done(self, code: int) -> None:
        if self.said:
            return
        self.said = True
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream must not hide the exit code
                stream.flush()
        if self.done is not None:
            with contextlib.suppress(OSError):
                os.write(self.done, frame("done", code=code))
