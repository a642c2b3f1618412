"""Faults made in the plugin's own code from the tests: a conftest of the inner session makes each
hook implementation or fixture that ``$CUDAGRAPH_GUARD_TEST_FAULTS`` names raise before (or
after) its own code, by a monkeypatch of the code its guard's site holds, which the session's
end undoes. It does so in every process of the session (xdist's workers, the test processes),
each reading the variable: the guard (``fault_guard``), which reads its site's code at every
call, must make each a warning."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import NamedTuple

import pytest

import pytest_cudagraph_guard
from pytest_cudagraph_guard.fault_guard import Part, site_of

FAULTS_VARIABLE = "CUDAGRAPH_GUARD_TEST_FAULTS"
BEFORE = "before"
AFTER = "after"
PACKAGE = pytest_cudagraph_guard.__name__

CONFTEST = f'''
import functools
import importlib
import inspect
import os

import pytest

from {PACKAGE}.fault_guard import site_of


class InjectedFault(RuntimeError):
    """Raised where the test made a fault in the plugin's own code."""


def _faulty(code, name, where):
    message = f"injected {{where}} {{name}}'s own code"
    if not inspect.isgeneratorfunction(code):

        def faulty(*args, **kwargs):
            raise InjectedFault(message)

    elif where == "{BEFORE}":

        def faulty(*args, **kwargs):
            raise InjectedFault(message)
            yield

    else:

        def faulty(*args, **kwargs):
            try:
                return (yield from code(*args, **kwargs))
            finally:
                raise InjectedFault(message)

    return functools.wraps(code)(faulty)


def _site(name):
    """The site of ``module.Class.hook``, of ``package.module.fixture`` or of ``module.hook``."""
    path, _, attribute = name.rpartition(".")
    try:
        holder = importlib.import_module("{PACKAGE}." + path)
    except ModuleNotFoundError:  # path ends with a class
        module, _, owner = path.rpartition(".")
        holder = getattr(importlib.import_module("{PACKAGE}." + module), owner)
    return site_of(getattr(holder, attribute))


_patched = pytest.MonkeyPatch()
for spec in filter(None, os.environ.get("{FAULTS_VARIABLE}", "").split(",")):
    name, _, where = spec.partition(":")
    site = _site(name)
    _patched.setattr(site, "code", _faulty(site.code, name, where or "{BEFORE}"))


def pytest_configure(config):
    config.add_cleanup(_patched.undo)
'''


class Hook(NamedTuple):
    """A hook implementation or fixture of the plugin: its class (as ``module.Class``, less the
    package) or, for a fixture, its module, its name, its part, and whether it runs code before
    and after a ``yield``."""

    owner: str
    name: str
    part: Part
    generator: bool

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}"


class Fault(NamedTuple):
    """One hook made to fail before or after its ``yield``."""

    hook: Hook
    where: str

    @property
    def spec(self) -> str:
        return self.hook.qualname if self.where == BEFORE else f"{self.hook.qualname}:{self.where}"

    @property
    def raised(self) -> str:
        return injected_message(self.hook.qualname, self.where)


def injected_message(qualname: str, where: str = BEFORE) -> str:
    """What the ``InjectedFault`` of a fault says."""
    return f"injected {where} {qualname}'s own code"


def short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.")


def plugin_modules() -> list[ModuleType]:
    """Every module of the package but the hookspecs (for other plugins) and the command line of
    test processes."""
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(pytest_cudagraph_guard.__path__, f"{PACKAGE}.")
        if not info.name.endswith((".hookspecs", ".__main__"))
    ]


def _guarded_in(module: ModuleType) -> list[Hook]:
    """The guarded hooks of the classes that ``module`` defines, and its guarded fixtures."""
    name = short(module.__name__)
    found = [
        (f"{name}.{value.__qualname__}", attribute, member)
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
        for attribute, member in vars(value).items()
    ]
    found += [(name, attribute, value) for attribute, value in vars(module).items()]
    return [
        Hook(owner, attribute, site.part, inspect.isgeneratorfunction(site.code))
        for owner, attribute, value in found
        if (site := site_of(value)) is not None and site.code.__module__ == module.__name__
    ]


def hooks() -> list[Hook]:
    """Every guarded hook implementation and fixture of the plugin, with its part."""
    return [hook for module in plugin_modules() for hook in _guarded_in(module)]


def make_faults(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *specs: str) -> None:
    """The inner session's conftest makes the faults ``specs`` (``module.Class.hook``, with
    ``:after`` for after its ``yield``) in every process of the session."""
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv(FAULTS_VARIABLE, ",".join(specs))
