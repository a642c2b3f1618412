"""A demo suite for the plugin's config guards (the full drafter example follows)."""

import pytest
import torch
import torch._inductor.config as inductor_config_module


def test_cudagraphs_fixture_turns_cuda_graphs_on(cudagraphs):
    assert inductor_config_module.triton.cudagraphs is True
    assert cudagraphs["triton.cudagraph_trees"] is True


def test_settings_are_back_after_the_fixture():
    assert inductor_config_module.triton.cudagraphs is False


def test_compiled_step_with_a_patched_config(inductor_config):
    with inductor_config.patch({"max_autotune": False}):
        step = torch.compile(lambda x: torch.sin(x) * 2 + torch.cos(x), backend="eager")
        assert torch.allclose(
            step(torch.ones(4)), torch.sin(torch.ones(4)) * 2 + torch.cos(torch.ones(4))
        )
    assert inductor_config.changes() == {}


@pytest.mark.cudagraph_thread(threads=4, tls="init")
def test_drafter_steps_in_four_threads():
    step = torch.compile(lambda x: x * 2 + 1, backend="eager")
    assert torch.equal(step(torch.ones(4)), torch.full((4,), 3.0))
