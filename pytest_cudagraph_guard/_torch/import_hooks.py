"""Running code right after a module is executed, before its importer gets it, through
``sys.meta_path`` finders that leave the finding and loading to the finders behind them."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def run_after_import(name: str, action: Callable[[], None]) -> bool:
    """Arranges for ``action`` to run as soon as module ``name`` has been executed, before the
    importer gets it; False, doing nothing, if ``name`` is imported already."""
    if name in sys.modules:
        return False
    sys.meta_path.insert(0, _AfterImport(name, action))
    return True


class _AfterImport:
    """A one-time finder: runs ``action`` right after module ``name`` is executed."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name = name
        self.action = action

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = spec_without(self, fullname)
        sys.meta_path.remove(self)
        if spec is not None:
            run_after_exec(spec, lambda module: self.action())
        return spec


class OnEachImport:
    """A finder that calls ``action(name, module)`` right after each module that ``wanted``
    accepts is executed, for as long as it is on ``sys.meta_path``."""

    def __init__(
        self, wanted: Callable[[str], bool], action: Callable[[str, ModuleType], None]
    ) -> None:
        self.wanted = wanted
        self.action = action

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not self.wanted(name):
            return None
        spec = spec_without(self, name)
        if spec is not None:
            run_after_exec(spec, functools.partial(self.action, name))
        return spec


def spec_without(finder: Any, name: str) -> Any:
    """``name``'s spec as the finders other than ``finder`` find it."""
    import importlib.util

    sys.meta_path.remove(finder)
    try:
        return importlib.util.find_spec(name)
    finally:
        sys.meta_path.insert(0, finder)


def run_after_exec(spec: Any, action: Callable[[ModuleType], None]) -> None:
    """Makes ``spec``'s loader call ``action(module)`` once it has executed the module, then
    leaves the loader as it was."""
    loader = spec.loader
    if loader is None or not hasattr(loader, "exec_module"):
        return
    exec_module = loader.exec_module

    def exec_then_act(module: ModuleType) -> None:
        del loader.exec_module
        exec_module(module)
        action(module)

    loader.exec_module = exec_then_act
