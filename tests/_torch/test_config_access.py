"""Raw writes to torch's config beneath its attribute protocol, on the installed torch."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator

import pytest
import torch._inductor.config as inductor

from pytest_cudagraph_guard._torch import config_access, cudagraph_settings, events, values

SWITCHES = events.CUDAGRAPH_SWITCHES


@pytest.fixture
def config() -> config_access.ConfigAccess:
    return config_access.import_config(config_access.INDUCTOR_CONFIG)


def _switches() -> tuple[bool, bool]:
    return inductor.triton.cudagraphs, inductor.triton.cudagraph_trees


@pytest.mark.skipif(
    cudagraph_settings.config_is_process_wide(), reason="config is process-wide here"
)
def test_set_in_context_sets_the_switches_in_that_context_alone(
    config: config_access.ConfigAccess,
) -> None:
    before = _switches()
    context = contextvars.copy_context()
    assert context.run(config.set_in_context, SWITCHES, (True, False)) is True
    assert context.run(_switches) == (True, False)
    assert _switches() == before
    assert context.run(lambda: inductor.get_config_copy()["triton.cudagraphs"]) is True


@pytest.fixture
def hidden_cudagraphs() -> Iterator[None]:
    entry = inductor._config["triton.cudagraphs"]
    entry.hide = True
    yield
    entry.hide = False


@pytest.mark.usefixtures("hidden_cudagraphs")
def test_set_in_context_leaves_a_hidden_key_to_write(config: config_access.ConfigAccess) -> None:
    context = contextvars.copy_context()
    assert context.run(config.set_in_context, SWITCHES, (True, False)) is False
    assert context.run(config.raw, "triton.cudagraph_trees").override is values.UNSET
