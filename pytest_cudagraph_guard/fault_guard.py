"""One guard over the plugin's own code: each hook implementation and fixture says where it is
defined which part of the plugin it is (``@guards(PART)``, directly above its ``def``), and runs
under that part's guard.

A part is what turns off on its own (``Part``: its :class:`faults.Loss`, which tests ask for it,
whether it is essential). The guard calls the code its :class:`Site` holds, read at each call, so
a test's monkeypatch of a site's ``code`` reaches a registered hook or fixture: the tests make
each fail so (``site_of`` finds the site of a guarded hook, of its bound method, or of the fixture
made of it).

What our code raises (a bug of ours, or a torch internal that moved) never becomes a test's
outcome: the guard notes it (:func:`note_failure`, one ``CudagraphGuardWarning`` per session and
part) and the hook goes on as if the plugin were not there. Where the test asked the plugin for
the part (a marker's threads or process, a fixture), the test fails instead, saying that the
plugin failed (:func:`_unhonoured`): it never passes silently. The test and the config a failure
is about are the hook's named arguments (pluggy passes them in the order of the code's
parameters): its ``item`` (``pyfuncitem``, a fixture ``request``'s node), its ``config`` or
that of its ``session``, ``collector``, ... or, where it has none, its plugin object's.

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

# The features' words for the guard beside ``guards``: what a part loses, code of ours run inside
# another's call (a thread's excepthook, a journal's write), and a notice said once a session.
from ._torch.faults import Loss as Loss  # noqa: PLC0414
from ._torch.faults import notice_once as notice_once  # noqa: PLC0414
from ._torch.faults import run_ours as run_ours  # noqa: PLC0414

# Whether a test asked for what a part does: how it asked (a marker, an option), else None.
Honours = Callable[[pytest.Item], "str | None"]
F = TypeVar("F", bound=Callable[..., Any])
Given = dict[str, object]  # a call's arguments, by the names of the code's parameters
Call = tuple[tuple[Any, ...], Given]  # a call's positional and keyword arguments

PLUGIN_ERROR_HINT: Final = (
    "a failure of cudagraph_guard's own code, not of the test: that part of the plugin is off "
    "for the rest of the session (see the CudagraphGuardWarning); please report it"
)


class Part(NamedTuple):
    """A part of the plugin that turns off on its own (its loss); which tests ask for it (they
    fail, naming the plugin, where it fails; for them it is tried again for each test); and
    whether nothing it serves can go on without it."""

    loss: Loss
    honours: Honours | None = None
    essential: bool = False


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
# The arguments whose ``config`` a failure's config is, where the hook is given none itself.
_WITH_CONFIG: Final = (
    "item",
    "pyfuncitem",
    "request",
    "session",
    "collector",
    "metafunc",
    "terminalreporter",
    "node",
    "self",  # the plugin object: those that keep their session's config
)
_SITE_ATTRIBUTE: Final = "_cudagraph_guard_site"


class Site:
    """One guarded hook or fixture: its part and name, the code the guard calls (read at each
    call), its parameters' names, and whether a failure stops it."""

    __slots__ = ("code", "name", "parameters", "part", "stops")

    def __init__(self, part: Part, code: Callable[..., Any]) -> None:
        self.part, self.code, self.name = part, code, code.__name__
        self.parameters = tuple(inspect.signature(code).parameters)
        self.stops = part.honours is None

    def given(self, args: tuple[Any, ...], kwargs: Given) -> Given:
        return {**dict(zip(self.parameters, args, strict=False)), **kwargs}


def guards(part: Part) -> Callable[[F], F]:
    """Puts the code it decorates (a hook implementation, a plugin object's method or a
    fixture's function) under ``part``'s guard: plain functions, and generators (``wrapper=True``
    hooks, yield fixtures), whose code before and after the ``yield`` is guarded while what the
    ``yield`` brings (the inner hooks, the test) is left untouched. What pytest reads of the code
    (its name, signature, hookimpl options) the guard carries."""

    def decorate(code: F) -> F:
        site = Site(part, code)
        if inspect.isgeneratorfunction(code):

            def guard(*args: Any, **kwargs: Any) -> Any:
                return (yield from _run_generator(site, args, kwargs))

        else:

            def guard(*args: Any, **kwargs: Any) -> Any:
                return _run(site, args, kwargs)

        functools.update_wrapper(guard, code)
        vars(guard)[_SITE_ATTRIBUTE] = site
        return guard  # type: ignore[return-value]

    return decorate


def site_of(guarded: object) -> Site | None:
    """The site of a guarded hook (or its bound method, or the fixture made of it)."""
    site = getattr(guarded, _SITE_ATTRIBUTE, None)
    return site if isinstance(site, Site) else None


def _run(site: Site, args: tuple[Any, ...], kwargs: Given) -> Any:
    if site.stops and faults.is_stopped(site.part.loss):
        return _stopped(site.part)
    try:
        return site.code(*args, **kwargs)
    except Exception as error:
        if not _is_ours(error):
            raise
        _failed(site, (args, kwargs), error, raise_now=False)
        return None


def _run_generator(site: Site, args: tuple[Any, ...], kwargs: Given) -> Generator[Any, Any, Any]:
    call = (args, kwargs)  # where the test and the config are found, should it fail
    if site.stops and faults.is_stopped(site.part.loss):
        _stopped(site.part)
        return (yield)
    try:
        inner = site.code(*args, **kwargs)
        sent_first = next(inner)
    except Exception as error:
        if not _is_ours(error):
            raise
        # Outside a test's phases a failure is no test's: the test fails at its setup.
        _failed(site, call, error, raise_now=site.name not in _OUTSIDE_PHASES)
        return (yield)
    try:
        sent = yield sent_first
    except GeneratorExit:
        _close(inner, site, call)
        raise
    except BaseException as thrown:
        return _after_yield(inner, site, call, None, thrown)
    return _after_yield(inner, site, call, sent, None)


def _after_yield(
    inner: Generator[Any, Any, Any],
    site: Site,
    call: Call,
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
        _failed(site, call, raised, raise_now=False)
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


def _close(inner: Generator[Any, Any, Any], site: Site, call: Call) -> None:
    try:
        inner.close()
    except Exception as error:
        if not _is_ours(error):
            raise
        _failed(site, call, error, raise_now=False)


def _is_ours(error: BaseException) -> bool:
    from .core.markers import MarkerError

    return isinstance(error, Exception) and not isinstance(error, (*NOT_OURS, MarkerError))


def _item_of(given: Given) -> pytest.Item | None:
    """The test of a failed call: its ``item`` (``pyfuncitem``), or its fixture request's."""
    item = given.get("item", given.get("pyfuncitem"))
    node = item if item is not None else getattr(given.get("request"), "node", None)
    return node if isinstance(node, pytest.Item) else None


def _config_of(given: Given) -> pytest.Config | None:
    config = given.get("config")
    if isinstance(config, pytest.Config):
        return config
    items = given.get("items")  # pytest_collection_modifyitems's: the first one's
    holders = [given.get(name) for name in _WITH_CONFIG]
    holders += items[:1] if isinstance(items, list) else []
    for holder in holders:
        config = getattr(holder, "config", None)
        if isinstance(config, pytest.Config):
            return config
    return None


def _failed(site: Site, call: Call, error: BaseException, *, raise_now: bool) -> None:
    """Our code failed: noted, and, where the test asked for that part, the test fails saying
    so; an ``essential`` part stops what it serves."""
    given = site.given(*call)
    item, config = _item_of(given), _config_of(given)
    configuring = site.name in _CONFIGURATION_HOOKS
    note_failure(site.part.loss, error, item, config, configuring=configuring, stops=site.stops)
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
        from .core.entries import ErrorEntry
        from .core.kinds import PLUGIN_ERROR
        from .core.stash import plugin_errors_key
        from .diagnosis import short_traceback, type_name

        entry = ErrorEntry(
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

    what = f"its {part.loss.feature} part ({part.loss.loses})"
    if error is None:
        return f"{what} is off after an earlier failure in this session"
    return f"{what} failed with {type_name(error)}: {error}"


def unhonoured_message(asked: str, why: str) -> str:
    return (
        f"cudagraph_guard could not run this test as {asked} asks: {why}. This is a failure "
        "of the plugin, not of the test (see the CudagraphGuardWarning); please report it"
    )


def start_session(config: pytest.Config) -> None:
    """The guard's session starts before any part's code runs: the torch boundary's state is
    this session's, and left at its end (the first cleanup added runs last, after every
    feature's) for the sessions that follow in this process or that this one ran inside."""
    faults.begin_fault_session()
    config.add_cleanup(faults.end_session)
