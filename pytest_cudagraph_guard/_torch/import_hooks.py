"""Running code right after a module is executed, before its importer gets it, through
``sys.meta_path`` finders that leave the finding and loading to the finders behind them.

Our part never fails the user's import: what it raises is noted (``faults``) and the module is
found and executed as it would be without us."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from .faults import Loss, run_ours

_HOOKING: Final = Loss("cudagraph_guard", "its work on torch modules as they are imported")
_WAITING: Final[list[OnEachImport]] = []  # this session's one-time finders, not yet used


def run_after_import(name: str, action: Callable[[], None], loss: Loss | None = None) -> bool:
    """Arranges for ``action`` to run as soon as module ``name`` has been executed, before the
    importer gets it; False, doing nothing, if ``name`` is imported already. What ``action``
    raises is noted under ``loss`` and the import goes on."""
    if name in sys.modules:
        return False
    finder = OnEachImport(name.__eq__, lambda _name, _module: action(), loss or _HOOKING, once=True)
    _WAITING.append(finder)
    sys.meta_path.insert(0, finder)
    return True


def end_session() -> None:
    """A session ended: what it arranged for modules it never imported is dropped, so that no
    later session runs it."""
    while _WAITING:
        _WAITING[-1].leave()


class OnEachImport:
    """A finder that calls ``action(name, module)`` right after each module that ``wanted``
    accepts is executed, for as long as it is on ``sys.meta_path``; a finder made ``once``
    leaves it at the first."""

    def __init__(
        self,
        wanted: Callable[[str], bool],
        action: Callable[[str, ModuleType], None],
        loss: Loss = _HOOKING,
        once: bool = False,
    ) -> None:
        self.wanted = wanted
        self.action = action
        self.loss = loss
        self.once = once

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not run_ours(_HOOKING, self.wanted, name):
            return None
        if self.once:
            self.leave()
        act = functools.partial(self.action, name)
        return run_ours(self.loss, _spec_acting, self, name, act, self.loss)

    def leave(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self in _WAITING:
            _WAITING.remove(self)


def _spec_acting(finder: Any, name: str, action: Callable[[ModuleType], None], loss: Loss) -> Any:
    """``name``'s spec as the other finders find it, made to call ``action`` once the module is
    executed. A failure to find it (theirs) is left to the import system: None, as if we were
    not there, and the finders behind us are asked again."""
    try:
        spec = spec_without(finder, name)
    except Exception:
        return None
    if spec is not None:
        run_after_exec(spec, action, loss)
    return spec


def spec_without(finder: Any, name: str) -> Any:
    """``name``'s spec as the finders other than ``finder`` find it."""
    import importlib.util

    present = finder in sys.meta_path
    if present:
        sys.meta_path.remove(finder)
    try:
        return importlib.util.find_spec(name)
    finally:
        if present:
            sys.meta_path.insert(0, finder)


def run_after_exec(spec: Any, action: Callable[[ModuleType], None], loss: Loss = _HOOKING) -> None:
    """Makes ``spec``'s loader call ``action(module)`` once it has executed the module, then
    leaves the loader as it was; what ``action`` raises is noted, never raised."""
    loader = spec.loader
    if loader is None or not hasattr(loader, "exec_module"):
        return
    exec_module = loader.exec_module

    def exec_then_act(module: ModuleType) -> None:
        with contextlib.suppress(AttributeError):
            del loader.exec_module
        exec_module(module)
        run_ours(loss, action, module)

    loader.exec_module = exec_then_act
