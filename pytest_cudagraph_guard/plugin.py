"""The ``cudagraph_guard`` pytest plugin: options, markers, and hooks that delegate.

Hooks are in lifecycle order. Loading this module never imports torch.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .fixtures import cudagraphs, dynamo_config, inductor_config
from .leak_guard import DEFAULT_GUARD_MODE, GUARD_MODES, LeakGuard

__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]

leak_guard_key = pytest.StashKey[LeakGuard]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudagraph-guard", "CUDA graphs and torch config (cudagraph-guard)")
    group.addoption(
        "--cudagraph-guard",
        dest="cudagraph_guard",
        choices=GUARD_MODES,
        default=None,
        help=(
            "what to do when a test leaves torch._inductor/_dynamo config or TORCHINDUCTOR_*, "
            "TORCHDYNAMO_*, TORCH_COMPILE* variables changed: restore them silently, warn "
            "(restore and warn), fail (restore and error the test), or off. "
            f"Default: ini cudagraph_guard, else {DEFAULT_GUARD_MODE}."
        ),
    )
    parser.addini(
        "cudagraph_guard",
        help=f"default for --cudagraph-guard: one of {', '.join(GUARD_MODES)}",
        default=DEFAULT_GUARD_MODE,
    )


def pytest_configure(config: pytest.Config) -> None:
    mode = _guard_mode(config)
    if mode != "off":
        guard = LeakGuard(mode)
        config.stash[leak_guard_key] = guard
        config.add_cleanup(guard.close)


def pytest_collection_finish(session: pytest.Session) -> None:
    guard = session.config.stash.get(leak_guard_key, None)
    if guard is not None:
        guard.before_tests()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    guard = request.config.stash.get(leak_guard_key, None)
    if guard is None or fixturedef.scope == "function":
        return (yield)
    with guard.shared_fixture(fixturedef):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    guard = item.config.stash.get(leak_guard_key, None)
    if guard is None:
        return (yield)
    try:
        result = yield
    except BaseException:
        guard.after_test(item, may_fail=False)
        raise
    guard.after_test(item)
    return result


def _guard_mode(config: pytest.Config) -> str:
    option = config.getoption("cudagraph_guard")
    if option is not None:
        return str(option)
    value = str(config.getini("cudagraph_guard")).strip()
    if value not in GUARD_MODES:
        raise pytest.UsageError(
            f"ini option cudagraph_guard = {value!r} is not one of {', '.join(GUARD_MODES)}"
        )
    return value
