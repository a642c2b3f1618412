"""One guard over the plugin's own code, put on each part of the plugin where ``plugin.py`` or a
feature registers it.

A part is what turns off on its own (``Part``); a plugin object's class names the parts it holds
(``parts``). ``register`` puts each hook implementation of a plugin object under its part's
guard as it registers the object (``guarded``: for an object given to ``pytest.main``), and
``fixture`` makes a guarded fixture of a part's code. The guard looks the code up on its class
at each call, so a test's monkeypatch of the class reaches a registered part: the tests make
each hook fail so.

What our code raises (a bug of ours, or a torch internal that moved) never becomes a test's
outcome: the guard notes it (:func:`note_failure`, one ``CudagraphGuardWarning`` per session and
part) and the hook goes on as if the plugin were not there. Where the test asked the plugin for
the part (a marker's threads or process, a fixture), the test fails instead, saying that the
plugin failed (:func:`_unhonoured`): it never passes silently.

Deliberate outcomes pass through: pytest's outcomes (``pytest.fail``, ``skip``, ...), usage
errors (``pytest.UsageError``, ``MarkerError``) and warnings raised as errors (``-W error``).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, TypeVar

import pytest

from ._torch import faults

# Whether a test asked for what a part does: how it asked (a marker, an option), else None.
Honours = Callable[[pytest.Item], "str | None"]
P = TypeVar("P")

PLUGIN_ERROR_HINT: Final = (
    "a failure of cudagraph_guard's own code, not of the test: that part of the plugin is off "
    "for the rest of the session (see the CudagraphGuardWarning); please report it"
)


class Part(NamedTuple):
    """A part of the plugin that turns off on its own (its :class:`faults.Loss`); which tests ask
    for it (they fail, naming the plugin, where it fails; for them it is tried again for each
    test); whether nothing it serves can go on without it; and, where an object holds several
    parts, the hooks (or fixtures) that are this one's (the part that names none has the others)."""

    feature: str
    loses: str
    honours: Honours | None = None
    essential: bool = False
    hooks: tuple[str, ...] = ()

    @property
    def loss(self) -> faults.Loss:
        return faults.Loss(self.feature, self.loses)


class PluginFailure(Exception):
    """Essential code of the plugin failed: what it serves cannot go on (a test process that
    cannot tell its test or report it)."""


# Deliberate, never a failure of ours: usage errors, warnings raised as errors (``-W error``),
# and a marker's bad argument (``MarkerError``).
NOT_OURS: Final = (pytest.UsageError, Warning, PluginFailure)
# Hooks that run before pytest records the session's warnings: theirs are configuration's.
_CONFIGURATION_HOOKS: Final = frozenset({"pytest_cmdline_main", "pytest_configure"})
# Wrappers of a whole test's protocol: what they fail is reported at the test's setup.
_OUTSIDE_PHASES: Final = frozenset({"pytest_runtest_protocol"})


def register(
    pluginmanager: pytest.PytestPluginManager, plugin: Any, name: str | None = None
) -> None:
    """Registers ``plugin`` with each of its hook implementations under its part's guard."""
    pluginmanager.register(guarded(plugin), name)


def guarded(plugin: P) -> P:
    """``plugin``, each of its hook implementations replaced (on the object) by its guard."""
    for name, part in hooks_of(plugin).items():
        setattr(plugin, name, _guard(part, type(plugin), name, plugin))
    return plugin


def fixture(owner: type, name: str) -> Any:
    """The fixture ``name`` whose code is ``owner``'s static method of that name, under the
    guard of its part."""
    return pytest.fixture(_guard(hooks_of(owner)[name], owner, name, None), name=name)


def hooks_of(owner: Any) -> dict[str, Part]:
    """Each hook implementation (``pytest_*``) or fixture's code of ``owner`` (a plugin object,
    or a class of fixtures' code) and its part, of those its class names (``parts``)."""
    parts: tuple[Part, ...] = owner.parts
    found = {name: part for part in parts for name in part.hooks}
    rest = [part for part in parts if not part.hooks]
    for name in dir(owner):
        if name.startswith("pytest_") and name not in found:
            if not rest:
                raise TypeError(f"{owner}'s {name} is of none of its parts")
            found[name] = rest[0]
    return found


class _Site:
    """One guarded hook or fixture: its part, name and loss, whether a failure stops it, and the
    object its code is bound to."""

    __slots__ = ("bound", "loss", "name", "part", "stops")

    def __init__(self, part: Part, name: str, plugin: object) -> None:
        self.part, self.name, self.loss = part, name, part.loss
        self.stops = part.honours is None
        self.bound = () if plugin is None else (plugin,)


def _guard(part: Part, owner: object, name: str, plugin: object) -> Callable[..., Any]:
    """The guard of ``owner``'s code ``name`` (bound to ``plugin``, where one is given): plain
    functions, and generators (``wrapper=True`` hooks, yield fixtures), whose code before and
    after the ``yield`` is guarded while what the ``yield`` brings (the inner hooks, the test) is
    left untouched."""
    code = getattr(owner, name)
    site = _Site(part, name, plugin)
    if inspect.isgeneratorfunction(code):

        def guard(*args: Any, **kwargs: Any) -> Any:
            return (yield from _run_generator(site, getattr(owner, name), args, kwargs))

    else:

        def guard(*args: Any, **kwargs: Any) -> Any:
            return _run(site, getattr(owner, name), args, kwargs)

    # What pytest reads of the code: its name, signature and hookimpl options.
    return functools.update_wrapper(guard, code if plugin is None else getattr(plugin, name))


def _run(site: _Site, code: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
    if site.stops and faults.is_stopped(site.loss):
        return _stopped(site.part)
    try:
        return code(*site.bound, *args, **kwargs)
    except Exception as error:
        if not _is_ours(error):
            raise
        _failed(site, (*site.bound, *args, *kwargs.values()), error, raise_now=False)
        return None


def _run_generator(
    site: _Site, code: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> Generator[Any, Any, Any]:
    values = (*site.bound, *args, *kwargs.values())  # where the test and the config are found
    if site.stops and faults.is_stopped(site.loss):
        _stopped(site.part)
        return (yield)
    try:
        inner = code(*site.bound, *args, **kwargs)
        given = next(inner)
    except Exception as error:
        if not _is_ours(error):
            raise
        # Outside a test's phases a failure is no test's: the test fails at its setup.
        _failed(site, values, error, raise_now=site.name not in _OUTSIDE_PHASES)
        return (yield)
    try:
        sent = yield given
    except GeneratorExit:
        _close(inner, site, values)
        raise
    except BaseException as thrown:
        return _after_yield(inner, site, values, None, thrown)
    return _after_yield(inner, site, values, sent, None)


def _after_yield(
    inner: Generator[Any, Any, Any],
    site: _Site,
    values: tuple[Any, ...],
    sent: Any,
    thrown: BaseException | None,
) -> Any:
    """Runs ``inner``'s code after its ``yield``; what the yield brought (the inner hooks'
    result or exception) goes on unchanged where that code fails."""
    try:
        return _resume(inner, sent, thrown)
    except BaseException as raised:
        if raised is thrown or not _is_ours(raised):
            raise  # a deliberate outcome: pytest.fail of --cudagraph-guard=fail, say
        _failed(site, values, raised, raise_now=False)
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


def _close(inner: Generator[Any, Any, Any], site: _Site, values: tuple[Any, ...]) -> None:
    try:
        inner.close()
    except Exception as error:
        if not _is_ours(error):
            raise
        _failed(site, values, error, raise_now=False)


def _is_ours(error: BaseException) -> bool:
    from .core.markers import MarkerError

    return isinstance(error, Exception) and not isinstance(error, (*NOT_OURS, MarkerError))


def _item_of(values: tuple[Any, ...]) -> pytest.Item | None:
    """The test of a failed call: its ``item`` (``pyfuncitem``), or its fixture request's."""
    for value in values:
        node = value.node if isinstance(value, pytest.FixtureRequest) else value
        if isinstance(node, pytest.Item):
            return node
    return None


def _config_of(values: tuple[Any, ...]) -> pytest.Config | None:
    for given in values:
        # pytest_collection_modifyitems's items: the first one's
        value = given[0] if isinstance(given, list) and given else given
        if isinstance(value, pytest.Config):
            return value
        config = getattr(value, "config", None)
        if isinstance(config, pytest.Config):
            return config
    return None


def _failed(site: _Site, values: tuple[Any, ...], error: BaseException, *, raise_now: bool) -> None:
    """Our code failed: noted, and, where the test asked for that part, the test fails saying
    so; an ``essential`` part stops what it serves."""
    item, config = _item_of(values), _config_of(values)
    configuring = site.name in _CONFIGURATION_HOOKS
    note_failure(site.loss, error, item, config, configuring=configuring, stops=site.stops)
    _unhonoured(site.part, item, config, error, raise_now=raise_now)
    if site.part.essential:
        raise PluginFailure(f"cudagraph_guard: {_why(site.part, error)}") from error


def _stopped(part: Part) -> None:
    """Code whose part is off: skipped, unless nothing can go on without it."""
    if part.essential:
        raise PluginFailure(f"cudagraph_guard: {_why(part, None)}")


# --- what a failure becomes ---------------------------------------------------------------------


def note_failure(
    loss: faults.Loss,
    error: BaseException,
    item: pytest.Item | None = None,
    config: pytest.Config | None = None,
    *,
    configuring: bool = False,
    stops: bool = True,
) -> None:
    """A failure of our code: a notice of the torch boundary's, once for the session (that part
    stops, unless tests ask for it by name), warned at once (as configuration's, with
    ``config``), and a ``plugin-error`` entry on the record of the test it met."""
    from .core.warnings import warn_torch_notices

    faults.note_internal_error(loss, error, stops=stops)
    if item is not None:
        from .core.records import PLUGIN_ERROR, error_entry, plugin_errors_key
        from .diagnosis import short_traceback, type_name

        entry = error_entry(
            threading.current_thread().name,
            type_name(error),
            f"{loss.feature}: {loss.loses}: {error}",
            kind=PLUGIN_ERROR,
            hint=PLUGIN_ERROR_HINT,
            traceback=short_traceback(error),
        )
        item.stash.setdefault(plugin_errors_key, []).append(entry)
    if config is None and item is not None:
        config = item.config
    nodeid = item.nodeid if item is not None else ""
    warn_torch_notices(config, when="config" if configuring else "runtest", nodeid=nodeid)


# --- tests that asked for what failed -----------------------------------------------------------

_unhonoured_key = pytest.StashKey[str]()
_unhonoured_in_session_key = pytest.StashKey[list[tuple[Honours, str]]]()


def _unhonoured(
    part: Part,
    item: pytest.Item | None,
    config: pytest.Config | None,
    error: BaseException,
    *,
    raise_now: bool,
) -> None:
    """Where the failed part serves tests that asked for it: the test fails now
    (``raise_now``), or at its setup (``fail_unhonoured``)."""
    if part.honours is None:
        return
    why = _why(part, error)
    if item is not None:
        asked = part.honours(item)
        if asked is None:
            return
        if raise_now:
            pytest.fail(unhonoured_message(asked, why), pytrace=False)
        item.stash[_unhonoured_key] = unhonoured_message(asked, why)
        return
    if config is not None:
        config.stash.setdefault(_unhonoured_in_session_key, []).append((part.honours, why))


def fail_unhonoured(item: pytest.Item) -> None:
    """Fails a test that asked the plugin for what a failed part of it does (at its setup)."""
    text = item.stash.get(_unhonoured_key, None)
    for honours, why in item.config.stash.get(_unhonoured_in_session_key, ()):
        if text is None and (asked := honours(item)) is not None:
            text = unhonoured_message(asked, why)
    if text is not None:
        pytest.fail(text, pytrace=False)


def _why(part: Part, error: BaseException | None) -> str:
    from .diagnosis import type_name

    what = f"its {part.feature} part ({part.loses})"
    if error is None:
        return f"{what} is off after an earlier failure in this session"
    return f"{what} failed with {type_name(error)}: {error}"


def unhonoured_message(asked: str, why: str) -> str:
    return (
        f"cudagraph_guard could not run this test as {asked} asks: {why}. This is a failure "
        "of the plugin, not of the test (see the CudagraphGuardWarning); please report it"
    )
