"""The plugin's fixtures: guards over torch's config modules and a CUDA-graphs switch.

Declared when the plugin loads; what they do (the config guard, torch's config modules) loads
when a test asks for one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..fault_guard import Loss, Part, guards

if TYPE_CHECKING:
    from .config_guard import ConfigGuard


def _guarded(module_name: str) -> Iterator[ConfigGuard]:
    """A guard over ``module_name``, restored after the test; skips the test where torch is not
    installed."""
    from .._torch import config_access, runtime
    from ..core.outcomes import NO_TORCH, skip_test
    from .config_guard import ConfigGuard

    try:
        guard = ConfigGuard(config_access.import_config(module_name))
    except runtime.TorchNotInstalled:
        skip_test(NO_TORCH)
    try:
        yield guard
    finally:
        guard.restore()


def _fixture_part(name: str, loses: str) -> Part:
    """A fixture's part: a test that asks for the fixture asks for it (the fixture's
    ``request`` tells the guard which test's record a failure goes to)."""
    return Part(Loss(name, loses), honours=lambda item: f"the {name} fixture")


@pytest.fixture
@guards(_fixture_part("inductor_config", "torch._inductor.config guarded and restored"))
def inductor_config(request: pytest.FixtureRequest) -> Iterator[ConfigGuard]:
    """``torch._inductor.config``, restored after the test whatever its outcome."""
    from .._torch import config_access

    yield from _guarded(config_access.INDUCTOR_CONFIG)


@pytest.fixture
@guards(_fixture_part("dynamo_config", "torch._dynamo.config guarded and restored"))
def dynamo_config(request: pytest.FixtureRequest) -> Iterator[ConfigGuard]:
    """``torch._dynamo.config``, restored after the test whatever its outcome."""
    from .._torch import config_access

    yield from _guarded(config_access.DYNAMO_CONFIG)


@pytest.fixture
@guards(_fixture_part("cudagraphs", "CUDA graphs switched on and compiled state reset"))
def cudagraphs(
    inductor_config: ConfigGuard, request: pytest.FixtureRequest
) -> Iterator[ConfigGuard]:
    """CUDA graphs on (with trees) for the test; compiled state is reset afterwards."""
    from .._torch import trees
    from .._torch.events import cudagraph_switches

    inductor_config.update(cudagraph_switches())
    try:
        yield inductor_config
    finally:
        trees.reset_compiled_state()
