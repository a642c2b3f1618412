"""The inductor_config, dynamo_config and cudagraphs fixtures in real pytest sessions."""

from __future__ import annotations

import pytest
import torch._dynamo.config as dynamo_config_module
import torch._inductor.config as inductor_config_module

OUTCOME_BODIES = {
    "passed": "pass",
    "failed": "assert False",
    "skipped": "pytest.skip('no')",
    "xfailed": "pytest.xfail('known')",
}


@pytest.mark.parametrize("outcome", sorted(OUTCOME_BODIES))
def test_inductor_config_is_restored_whatever_the_outcome(
    ourtester: pytest.Pytester, outcome: str
) -> None:
    ourtester.makepyfile(
        f"""
        import pytest
        import torch._inductor.config as ic

        def test_changes(inductor_config):
            inductor_config["triton.cudagraphs"] = True
            ic.triton.cudagraph_trees = False
            del ic.max_autotune
            {OUTCOME_BODIES[outcome]}

        def test_later():
            assert ic.triton.cudagraphs is False
            assert ic.triton.cudagraph_trees is True
            assert ic.max_autotune is False
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=2 if outcome == "passed" else 1, **_not_passed(outcome))
    assert inductor_config_module.triton.cudagraphs is False


def _not_passed(outcome: str) -> dict[str, int]:
    return {} if outcome == "passed" else {outcome: 1}


def test_restored_when_setup_of_a_later_fixture_errors(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.config as ic

        @pytest.fixture
        def broken(inductor_config):
            inductor_config["triton.cudagraphs"] = True
            raise RuntimeError("setup broke")

        @pytest.fixture
        def broken_teardown(inductor_config):
            yield
            inductor_config["triton.cudagraph_trees"] = False
            raise RuntimeError("teardown broke")

        def test_setup_error(broken):
            pass

        def test_teardown_error(broken_teardown, inductor_config):
            inductor_config["max_autotune"] = True

        def test_later():
            assert (ic.triton.cudagraphs, ic.triton.cudagraph_trees, ic.max_autotune) == (
                False, True, False)
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*RuntimeError: setup broke*", "*RuntimeError: teardown broke*"])


def test_restored_after_keyboard_interrupt(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        def test_interrupted(inductor_config, dynamo_config):
            inductor_config["triton.cudagraphs"] = True
            dynamo_config["recompile_limit"] = 1
            raise KeyboardInterrupt
        """
    )
    recorder = ourtester.inline_run(no_reraise_ctrlc=True)
    assert recorder.ret == pytest.ExitCode.INTERRUPTED
    assert inductor_config_module.triton.cudagraphs is False
    assert dynamo_config_module.recompile_limit != 1


def test_dotted_get_set_update_and_changes(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._inductor.config as ic

        def test_guard(inductor_config):
            assert inductor_config["triton.cudagraphs"] is False
            inductor_config["triton.cudagraphs"] = True
            assert ic.triton.cudagraphs is True
            inductor_config.update({"triton.cudagraph_trees": False, "max_autotune": True})
            assert inductor_config.changes() == {
                "triton.cudagraphs": (False, True),
                "triton.cudagraph_trees": (True, False),
                "max_autotune": (False, True),
            }
            assert "triton.cudagraphs" in inductor_config
            assert "triton.nope" not in inductor_config

        def test_patch_block(inductor_config):
            with inductor_config.patch({"triton.cudagraphs": True}, max_autotune=True):
                assert ic.triton.cudagraphs is True and ic.max_autotune is True
            assert ic.triton.cudagraphs is False and ic.max_autotune is False
            assert inductor_config.changes() == {}

        def test_patch_block_restores_on_exception(inductor_config):
            try:
                with inductor_config.patch({"triton.cudagraphs": True}):
                    raise ValueError
            except ValueError:
                pass
            assert ic.triton.cudagraphs is False

        def test_changes_sees_changes_made_any_way(inductor_config):
            ic.triton.cudagraphs = True
            with ic.patch({"max_autotune": True}):
                assert set(inductor_config.changes()) == {"triton.cudagraphs", "max_autotune"}
            assert set(inductor_config.changes()) == {"triton.cudagraphs"}
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=4)


def test_unknown_key_names_the_closest_keys(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.config as ic

        def test_get(inductor_config):
            inductor_config["triton.cudagraph_tree"]

        def test_set(inductor_config):
            inductor_config["triton.cudagraph_tree"] = True

        def test_update_is_all_or_nothing(inductor_config):
            with pytest.raises(KeyError):
                inductor_config.update({"max_autotune": True, "triton.cudagraph_tree": True})
            assert ic.max_autotune is False

        def test_is_a_key_error(dynamo_config):
            with pytest.raises(KeyError, match="did you mean 'recompile_limit'"):
                dynamo_config["recompile_limt"]
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * 'triton.cudagraph_tree' is not a key of torch._inductor.config;"
            " did you mean 'triton.cudagraph_trees'*",
        ]
    )


def test_dynamo_config_guard(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._dynamo.config as dc

        def test_set(dynamo_config):
            before = dc.recompile_limit
            dynamo_config["recompile_limit"] = before + 5
            dynamo_config.update({"suppress_errors": True})
            assert dynamo_config.changes() == {
                "recompile_limit": (before, before + 5),
                "suppress_errors": (False, True),
            }

        def test_later():
            assert dc.suppress_errors is False
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)


def test_cudagraphs_fixture_turns_cudagraphs_on_and_resets_compiled_state(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import torch
        import torch._dynamo.convert_frame as convert_frame
        import torch._inductor.config as ic

        def test_on(cudagraphs):
            assert ic.triton.cudagraphs is True and ic.triton.cudagraph_trees is True
            assert cudagraphs["triton.cudagraphs"] is True
            torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
            assert convert_frame.FRAME_COUNTER > 0

        def test_after():
            assert ic.triton.cudagraphs is False
            assert convert_frame.FRAME_COUNTER == 0
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)


def test_cudagraphs_fixture_restores_trees_off(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._inductor.config as ic

        def test_trees_off(cudagraphs):
            cudagraphs["triton.cudagraph_trees"] = False

        def test_after():
            assert ic.triton.cudagraph_trees is True and ic.triton.cudagraphs is False
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)
