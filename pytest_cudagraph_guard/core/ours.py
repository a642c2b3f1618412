"""One guard over the plugin's own code, applied to every hook implementation and fixture.

What our code raises (a bug of ours, or a torch internal that moved) never becomes a test's
outcome. The guard notes it in the torch boundary's fault table, the one place for such notes
(``_torch.faults``: one ``CudagraphGuardWarning`` per session and part, naming the feature, the
torch release and what is lost; the part is off for the rest of the session), adds a
``plugin-error`` entry to the test's record, and the hook goes on as if the plugin were not
there. Where the test asked the plugin for what the failed code does (a marker's threads or
process), the test fails instead, saying that the plugin failed: it never passes silently.

Deliberate outcomes pass through: pytest's outcomes (``pytest.fail``, ``skip``, ...), usage
errors (``pytest.UsageError``, ``MarkerError``) and warnings raised as errors (``-W error``).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, TypeVar, cast

import pytest

from .. import _torch

# Every hook and fixture of the plugin is decorated here when its module loads: what a failure
# needs (the diagnosis, the records, the markers) is imported once one happens.

F = TypeVar("F", bound=Callable[..., Any])

# Test-only: ``NAME`` or ``NAME:after`` makes the guarded code named NAME (``Guarded.name``)
# raise ``InjectedFault`` before (or after) its own code runs; several, comma-separated, each
# fail. Read once per session.
FAULT_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_FAULT"
BEFORE: Final = "before"
AFTER: Final = "after"
GUARDED_ATTRIBUTE: Final = "cudagraph_guarded"  # each guarded function's ``Guarded``
# Hooks that run before pytest records the session's warnings: theirs are configuration's.
_CONFIGURATION_HOOKS: Final = frozenset({"pytest_cmdline_main", "pytest_configure"})
_PACKAGE: Final = __name__.rsplit(".", 2)[0]

# Whether a test asked for what a hook does: how it asked (a marker, an option), else None.
Honours = Callable[[pytest.Item], "str | None"]


class Guarded(NamedTuple):
    """What the guard knows of one hook implementation or fixture: its name for the fault
    switch, the part of the plugin it belongs to, whether it runs code before and after a
    ``yield``, which tests ask for what it does, and whether nothing can go on without it."""

    name: str
    loss: _torch.Loss
    generator: bool
    honours: Honours | None
    essential: bool
    stops: bool  # once failed, off for the session; not where tests ask for it by name


class InjectedFault(RuntimeError):
    """Raised by the guard where ``PYTEST_CUDAGRAPH_GUARD_FAULT`` names the guarded code."""


# Wrappers of a whole test's protocol: what they fail is reported at the test's setup.
_OUTSIDE_PHASES: Final = frozenset({"pytest_runtest_protocol"})


class PluginFailure(Exception):
    """Essential code of the plugin failed: what it serves cannot go on (a test process that
    cannot tell its test or report it)."""


# Deliberate, never a failure of ours: usage errors, warnings raised as errors (``-W error``),
# and a marker's bad argument (``MarkerError``).
NOT_OURS: Final = (pytest.UsageError, Warning, PluginFailure)


class _FaultSwitch:
    """The code that ``PYTEST_CUDAGRAPH_GUARD_FAULT`` makes fail in this session, if any."""

    def __init__(self) -> None:
        self.faults: frozenset[tuple[str, str]] = frozenset()  # (name, where)

    def read(self) -> None:
        entries = filter(None, os.environ.get(FAULT_VARIABLE, "").replace(" ", "").split(","))
        self.faults = frozenset(
            (name, where or BEFORE) for name, _, where in (e.partition(":") for e in entries)
        )

    def stop(self) -> None:
        self.faults = frozenset()

    def fault(self, guarded: Guarded, where: str) -> InjectedFault | None:
        if (guarded.name, where) not in self.faults:
            return None
        return InjectedFault(injected_message(guarded.name, where))


def fault_entry(name: str, where: str) -> str:
    """How ``PYTEST_CUDAGRAPH_GUARD_FAULT`` names the guarded code ``name`` failing ``where``."""
    return name if where == BEFORE else f"{name}:{where}"


def injected_message(name: str, where: str) -> str:
    """What the ``InjectedFault`` of that entry says."""
    return f"injected by {FAULT_VARIABLE} {where} {name}'s own code"


_SWITCH: Final = _FaultSwitch()


def ours(
    loss: _torch.Loss,
    *,
    honours: Honours | None = None,
    essential: bool = False,
    starts_session: bool = False,
) -> Callable[[F], F]:
    """Guards a hook implementation or fixture of the plugin: plain functions, and generators
    (``wrapper=True`` hooks, yield fixtures), whose code before and after the ``yield`` is
    guarded while what the ``yield`` brings (the inner hooks, the test) is left untouched.
    ``honours``: which tests ask for what it does (they fail, naming the plugin, if it cannot).
    ``essential``: nothing it serves can go on without it: its failure is noted, then raised
    as ``PluginFailure``. ``starts_session``: a first hook of a session, where the fault switch
    is read."""

    def decorate(function: F) -> F:
        generator = inspect.isgeneratorfunction(function)
        stops = honours is None  # each test that asks by name gets a fresh try
        guarded = Guarded(_name_of(function), loss, generator, honours, essential, stops)
        if guarded.generator:
            wrapper = _guard_generator(function, guarded)
        else:
            wrapper = _guard_call(function, guarded, starts_session)
        setattr(wrapper, GUARDED_ATTRIBUTE, guarded)
        return cast(F, wrapper)

    return decorate


def _start_session(config: pytest.Config | None) -> None:
    """A session's first hook: the torch boundary's state and the fault switch are this
    session's, and left at its end for the sessions that follow in this process (or that this
    one ran inside). Its first cleanup: it runs after every feature's."""
    _torch.begin_session()
    _SWITCH.read()
    if config is not None:
        config.add_cleanup(_torch.end_session)
        config.add_cleanup(_SWITCH.stop)


def guarded_of(function: object) -> Guarded | None:
    found = getattr(function, GUARDED_ATTRIBUTE, None)
    return found if isinstance(found, Guarded) else None


def _name_of(function: Callable[..., Any]) -> str:
    module = function.__module__.removeprefix(f"{_PACKAGE}.")
    return f"{module}.{function.__qualname__}"


def _is_ours(error: BaseException) -> bool:
    from .markers import MarkerError

    return isinstance(error, Exception) and not isinstance(error, (*NOT_OURS, MarkerError))


def _guard_call(function: F, guarded: Guarded, starts_session: bool) -> Callable[..., Any]:
    @functools.wraps(function)
    def guard(*args: Any, **kwargs: Any) -> Any:
        if starts_session:
            _start_session(_Call(function, args, kwargs).config())
        if guarded.stops and _torch.is_stopped(guarded.loss):
            _stopped(guarded)
            return None
        try:
            fault = _SWITCH.fault(guarded, BEFORE) if _SWITCH.faults else None
            if fault is not None:
                raise fault
            return function(*args, **kwargs)
        except Exception as error:
            if not _is_ours(error):
                raise
            _failed(guarded, _Call(function, args, kwargs), error, raise_now=False)
            return None

    return guard


def _guard_generator(function: F, guarded: Guarded) -> Callable[..., Any]:
    @functools.wraps(function)
    def guard(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        call = _Call(function, args, kwargs)
        if guarded.stops and _torch.is_stopped(guarded.loss):
            _stopped(guarded)
            return (yield)
        try:
            fault = _SWITCH.fault(guarded, BEFORE) if _SWITCH.faults else None
            if fault is not None:
                raise fault
            inner = function(*args, **kwargs)
            given = next(inner)
        except Exception as error:
            if not _is_ours(error):
                raise
            # Outside a test's phases a failure is no test's: the test fails at its setup.
            in_a_phase = function.__name__ not in _OUTSIDE_PHASES
            _failed(guarded, call, error, raise_now=in_a_phase)
            return (yield)
        try:
            sent = yield given
        except GeneratorExit:
            _close(inner, guarded, call)
            raise
        except BaseException as thrown:
            return _after_yield(inner, guarded, call, None, thrown)
        return _after_yield(inner, guarded, call, sent, None)

    return guard


def _after_yield(
    inner: Generator[Any, Any, Any],
    guarded: Guarded,
    call: _Call,
    sent: Any,
    thrown: BaseException | None,
) -> Any:
    """Runs ``inner``'s code after its ``yield``; what the yield brought (the inner hooks'
    result or exception) goes on unchanged where that code fails."""
    try:
        result = _resume(inner, sent, thrown)
    except BaseException as raised:
        if raised is not thrown and not _is_ours(raised):
            raise  # a deliberate outcome: pytest.fail of --cudagraph-guard=fail, say
        failure = raised if raised is not thrown else _SWITCH.fault(guarded, AFTER)
        if failure is None:
            raise
    else:
        failure = _SWITCH.fault(guarded, AFTER) if _SWITCH.faults else None
        if failure is None:
            return result
    _failed(guarded, call, failure, raise_now=False)
    if thrown is not None:
        raise thrown
    return sent


def _resume(inner: Generator[Any, Any, Any], sent: Any, thrown: BaseException | None) -> Any:
    try:
        if thrown is not None:
            inner.throw(thrown)
        else:
            inner.send(sent)
    except StopIteration as stop:
        return stop.value
    inner.close()
    raise RuntimeError("a guarded generator yielded more than once")


def _close(inner: Generator[Any, Any, Any], guarded: Guarded, call: _Call) -> None:
    try:
        inner.close()
    except Exception as error:
        if not _is_ours(error):
            raise
        _failed(guarded, call, error, raise_now=False)


class _Call:
    """One call of guarded code: where its test and its session's config are found, looked
    for only once the call failed."""

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs

    def arguments(self) -> dict[str, object]:
        code = getattr(self.function, "__code__", None)
        if code is not None:  # what inspect.signature says of a plain function, for far less
            names = list(code.co_varnames[: code.co_argcount])
        else:
            names = list(inspect.signature(self.function).parameters)
        return {**dict(zip(names, self.args, strict=False)), **self.kwargs}

    def item(self) -> pytest.Item | None:
        found = self.arguments()
        for name in ("item", "pyfuncitem"):
            if isinstance(found.get(name), pytest.Item):
                return cast(pytest.Item, found[name])
        node = getattr(found.get("request"), "node", None)
        return node if isinstance(node, pytest.Item) else None

    def config(self) -> pytest.Config | None:
        for given in self.arguments().values():
            # pytest_collection_modifyitems's items: the first one's
            value = given[0] if isinstance(given, list) and given else given
            if isinstance(value, pytest.Config):
                return value
            config = getattr(value, "config", None)
            if isinstance(config, pytest.Config):
                return config
        return None


def _failed(guarded: Guarded, call: _Call, error: BaseException, *, raise_now: bool) -> None:
    """Our code failed: noted, and, where the test asked for that part, the test fails saying
    so; ``essential`` code stops what it serves."""
    configuring = call.function.__name__ in _CONFIGURATION_HOOKS
    from .plugin_errors import note_failure

    note_failure(
        guarded.loss,
        error,
        call.item(),
        call.config(),
        configuring=configuring,
        stops=guarded.stops,
    )
    _unhonoured(guarded, call, error, raise_now=raise_now)
    if guarded.essential:
        raise PluginFailure(f"cudagraph_guard: {_why(guarded.loss, error)}") from error


def _stopped(guarded: Guarded) -> None:
    """Code whose part is off: skipped, unless nothing can go on without it."""
    if guarded.essential:
        raise PluginFailure(f"cudagraph_guard: {_why(guarded.loss, None)}")


# --- tests that asked for what failed ------------------------------------------------------

_unhonoured_key = pytest.StashKey[str]()
_unhonoured_in_session_key = pytest.StashKey[list[tuple[Honours, str]]]()


def _unhonoured(guarded: Guarded, call: _Call, error: BaseException, *, raise_now: bool) -> None:
    """Where the failed code serves tests that asked for it: the test fails now
    (``raise_now``), or at its setup (``fail_unhonoured``)."""
    if guarded.honours is None:
        return
    why = _why(guarded.loss, error)
    item = call.item()
    if item is not None:
        asked = guarded.honours(item)
        if asked is None:
            return
        if raise_now:
            pytest.fail(unhonoured_message(asked, why), pytrace=False)
        item.stash[_unhonoured_key] = unhonoured_message(asked, why)
        return
    config = call.config()
    if config is not None:
        config.stash.setdefault(_unhonoured_in_session_key, []).append((guarded.honours, why))


def fail_unhonoured(item: pytest.Item) -> None:
    """Fails a test that asked the plugin for what a failed part of it does (at its setup)."""
    text = item.stash.get(_unhonoured_key, None)
    for honours, why in item.config.stash.get(_unhonoured_in_session_key, ()):
        if text is None and (asked := honours(item)) is not None:
            text = unhonoured_message(asked, why)
    if text is not None:
        pytest.fail(text, pytrace=False)


def _why(loss: _torch.Loss, error: BaseException | None) -> str:
    from .diagnosis import type_name

    what = f"its {loss.feature} part ({loss.loses})"
    if error is None:
        return f"{what} is off after an earlier failure in this session"
    return f"{what} failed with {type_name(error)}: {error}"


def unhonoured_message(asked: str, why: str) -> str:
    return (
        f"cudagraph_guard could not run this test as {asked} asks: {why}. This is a failure "
        "of the plugin, not of the test (see the CudagraphGuardWarning); please report it"
    )
