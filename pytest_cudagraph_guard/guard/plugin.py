"""``--cudagraph-guard``: catches tests that leave torch config or environment changes behind.
Registered by ``plugin.py`` unless ``--cudagraph-guard=off``."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pytest

from .._torch import runtime
from ..core.stash import leaks_key
from ..core.warnings import (
    CudagraphConfigLeakWarning,
    warn_torch_notices,
)
from ..fault_guard import Loss, Part, guards, note_failure, notice_once
from .state import QuickCheck, Snapshot

if TYPE_CHECKING:
    from .diff import Change

T = TypeVar("T")

_PACKAGE: Final = Path(__file__).resolve().parent
_CHECKING: Final = Part(Loss("--cudagraph-guard", "leak checks"))


def leak_message(nodeid: str, changes: list[Change], restored: bool) -> str:
    what = "restored" if restored else "left in place"
    lines = [f"{nodeid} leaked {len(changes)} config/environment change(s) ({what}):"]
    lines += [f"  {change.describe()}" for change in changes]
    return "\n".join(lines)


class LeakGuard:
    """Compares the guarded state after each test with a baseline carried from test to test,
    which takes in what shared (not function-scoped) fixtures change: those changes are meant
    to outlive one test."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._baseline: Snapshot | None = None
        self._quick: QuickCheck | None = None
        self._counted: dict[int, Any] = {}
        self.disabled = False

    def _safely(self, action: Callable[[], T]) -> T | None:
        """Runs a step of the guard, never failing the test or the session. A config module
        that this plugin cannot read turns the guard off with a warning; a bug of ours does too,
        as an internal error with its traceback, once the config is put back as it was."""
        if self.disabled:
            return None
        try:
            return action()
        except Exception as exc:
            self.disabled = True
            if raised_by_us(exc):
                self._put_back_baseline()
                note_failure(_CHECKING.loss, exc)
                return None
            notice_once(
                "leak guard: unreadable config",
                f"cudagraph_guard could not check torch's config ({type(exc).__name__}: "
                f"{exc}); leaks are not checked for the rest of this session",
            )
        return None

    def _put_back_baseline(self) -> None:
        """After a bug of ours: the state the guard last saw, put back as well as it can be."""
        if self._baseline is not None:
            with contextlib.suppress(Exception):
                from .diff import restore

                restore(self._baseline)

    @guards(_CHECKING)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Takes the baseline once collection (and module-level code) is done; one taken
        earlier stands where nothing changed since."""
        self._safely(self._baseline_after_collection)

    def take_baseline_early(self) -> None:
        """The baseline, taken before collection: a spare test process's, while it waits for
        its test, so that the test does not wait for it."""
        self._safely(self._rebaseline)

    def _baseline_after_collection(self) -> None:
        if self._quick is None or not self._quick.unchanged():
            self._rebaseline()

    @pytest.hookimpl(wrapper=True)
    @guards(_CHECKING)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        if fixturedef.scope == "function":
            return (yield)
        with self.shared_fixture(fixturedef):
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    @guards(_CHECKING)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        """After every other teardown: what the test leaves changed is a leak."""
        try:
            result = yield
        except BaseException:
            self._check(item, may_fail=False)
            raise
        self._check(item, may_fail=True)
        return result

    def _check(self, item: pytest.Item, *, may_fail: bool) -> None:
        """The leak check; what it noted of torch is warned at once, at this test's teardown,
        whichever teardown wrapper of the session's is outermost."""
        try:
            changes = self._safely(self._leaked_changes) or []
            if changes:
                item.stash[leaks_key] = [change.as_leak() for change in changes]
                message = leak_message(item.nodeid, changes, restored=True)
                if self.mode == "warn":
                    _warn_at(item, message)
                elif self.mode == "fail" and may_fail:
                    pytest.fail(f"cudagraph_guard: {message}", pytrace=False)
        finally:
            warn_torch_notices(item.config, nodeid=item.nodeid)

    @contextmanager
    def shared_fixture(self, fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
        """Takes into the baseline what a shared fixture's setup and teardown change."""
        pending: list[Snapshot] = []

        def before_teardown() -> None:
            before = self._state_now()
            if before is not None:
                pending.append(before)

        def after_teardown() -> None:
            if pending:
                self._take_in_since(pending.pop())

        if self.disabled:
            yield
            return
        fixturedef.addfinalizer(after_teardown)
        try:
            with self._taking_in(counted=True):
                yield
        finally:
            fixturedef.addfinalizer(before_teardown)

    def take_in(self, change: Callable[[], None]) -> None:
        """Makes ``change`` and takes what it changed into the baseline, as a shared fixture's
        (in full: the plugin's own changes are raw writes, which the change counter does not
        see)."""
        with self._taking_in(counted=False):
            change()

    @contextmanager
    def _taking_in(self, *, counted: bool) -> Iterator[None]:
        """Takes into the baseline what the block changes; ``counted``: the block changes
        torch's config only through the config's own attributes, as tests do."""
        before = self._state_now() if counted else self._safely(Snapshot.take)
        try:
            yield
        finally:
            if before is not None:
                self._take_in_since(before)

    def _baseline_stands(self) -> bool:
        """Whether the quick check shows that nothing changed since the baseline was taken."""
        quick = self._quick
        return (
            self._baseline is not None and quick is not None and bool(self._safely(quick.unchanged))
        )

    def _state_now(self) -> Snapshot | None:
        """The state now: the baseline itself where it stands (a session-scoped fixture, set up
        in every test process, then costs no snapshot), else a snapshot."""
        return self._baseline if self._baseline_stands() else self._safely(Snapshot.take)

    def _take_in_since(self, before: Snapshot) -> None:
        """Takes into the baseline what changed since ``before`` (from :meth:`_state_now`)."""
        if before is self._baseline and self._baseline_stands():
            return  # still the baseline: nothing to take in
        after = self._safely(Snapshot.take)
        if after is not None:
            self._safely(lambda: self._absorb(before, after))

    def close(self) -> None:
        if not self._counted:  # nothing counted: the counting was never loaded
            return
        from .._torch import counting

        for module in self._counted.values():
            counting.stop_counting(module)
        self._counted.clear()

    def _leaked_changes(self) -> list[Change]:
        if self._baseline is None:
            self._rebaseline()
            return []
        if self._quick is not None and self._quick.unchanged():
            return []
        from .diff import restore  # something changed: what, and put it back

        changes = restore(self._baseline)
        self._rebaseline()
        return changes

    def _absorb(self, before: Snapshot, after: Snapshot) -> None:
        if self._baseline is None:
            return
        from .diff import absorb

        absorb(self._baseline, before, after)
        self._count_loaded_modules()
        self._quick = None

    def _rebaseline(self) -> None:
        self._count_loaded_modules()
        self._baseline = Snapshot.take()
        self._quick = QuickCheck(self._baseline)

    def _count_loaded_modules(self) -> None:
        if not runtime.torch_loaded():  # no config module yet, and nothing of torch's to load
            return
        from .._torch import config_access, counting

        for cfg in config_access.loaded_guarded_configs():
            if id(cfg.module) not in self._counted:
                counting.count_changes(cfg.module)
                self._counted[id(cfg.module)] = cfg.module


def _warn_at(item: pytest.Item, message: str) -> None:
    """Warns at the test's own line; where warnings are errors (``-W error``), the test errors
    with the message alone, not the guard's source."""
    path, lineno, _ = item.location
    try:
        warnings.warn_explicit(
            CudagraphConfigLeakWarning(message),
            CudagraphConfigLeakWarning,
            filename=str(item.path if item.path is not None else path),
            lineno=(lineno or 0) + 1,
        )
    except CudagraphConfigLeakWarning as error:
        pytest.fail(f"{CudagraphConfigLeakWarning.__name__}: {error}", pytrace=False)


def raised_by_us(error: BaseException) -> bool:
    """Whether ``error`` was raised by the plugin's own code rather than while reading torch:
    the frame that raised it is in this package, outside the torch boundary (``_torch``)."""
    from ..diagnosis import innermost

    tb = innermost(error)
    if tb is None:
        return False
    raised_in = Path(tb.tb_frame.f_code.co_filename).resolve()
    return raised_in.is_relative_to(_PACKAGE) and not raised_in.is_relative_to(_PACKAGE / "_torch")
