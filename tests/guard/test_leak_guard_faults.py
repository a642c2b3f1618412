"""--cudagraph-guard when things go wrong: a bug of ours, a config torch lays out unknowably, a
value that cannot be copied, a torch whose config classes cannot be swapped."""

from __future__ import annotations

import importlib.util

import pytest

from pytest_cudagraph_guard.guard import diff, state
from pytest_cudagraph_guard.guard.plugin import raised_by_us

LEAK_THEN_CHECK = """
    import torch._inductor.config as ic

    def test_leaks():
        ic.max_autotune = True

    def test_sees_it_restored():
        assert ic.max_autotune is False
    """


NO_ASYNCIO = ("-p", "no:asyncio") if importlib.util.find_spec("pytest_asyncio") else ()


def test_a_bug_of_ours_is_an_internal_error_and_the_config_is_still_restored(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state.QuickCheck, "unchanged", None)  # calling it raises, in ours
    ourtester.makepyfile(test_suite=LEAK_THEN_CHECK)
    # Where pytest-asyncio's shared fixtures are set up, the guard compares in full.
    result = ourtester.runpytest("--cudagraph-guard=fail", *NO_ASYNCIO)
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard internal error in --cudagraph-guard *"
            "turned off for this session: leak checks. *",
            "*Traceback (most recent call last):*",
            "*guard/plugin.py*",
            "*TypeError: 'NoneType' object is not callable",
        ]
    )
    result.stdout.no_fnmatch_line("*could not check torch's config*")


def test_a_value_that_cannot_be_copied_is_named_once_and_its_replacement_still_caught(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import torch._inductor.config as ic

        class Uncopyable:
            def __init__(self):
                self.passes = []

            def __deepcopy__(self, memo):
                raise TypeError("cannot copy this pass")

        ic.post_grad_custom_post_pass = Uncopyable()

        def pytest_unconfigure(config):
            ic.post_grad_custom_post_pass = None
        """
    )
    ourtester.makepyfile(
        test_suite="""
        import torch._inductor.config as ic

        def test_changes_it_in_place():
            ic.post_grad_custom_post_pass.passes.append("mine")

        def test_replaces_it():
            ic.post_grad_custom_post_pass = None

        def test_sees_it_back():
            assert ic.post_grad_custom_post_pass is not None
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(passed=3, warnings=2)
    named = "*CudagraphGuardWarning: cudagraph_guard cannot snapshot "
    named += "`torch._inductor.config.post_grad_custom_post_pass`: in-place changes to it are "
    named += "not tracked"
    result.stdout.fnmatch_lines([named])
    assert result.stdout.str().count("cannot snapshot") == 1
    result.stdout.fnmatch_lines(
        [
            "*test_suite.py::test_replaces_it leaked 1 *",
            "*post_grad_custom_post_pass: <*Uncopyable object at *> -> None",
        ]
    )


def test_a_torch_whose_config_class_cannot_be_swapped_still_catches_leaks(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_cudagraph_guard._torch import counting

    def refuse(config_module: object) -> None:
        raise TypeError("__class__ assignment only supported for mutable types")

    monkeypatch.setattr(counting, "_start_counting", refuse)
    monkeypatch.setattr(counting._STATE, "modules", {})
    monkeypatch.setattr(counting._STATE, "incomplete", False)
    ourtester.makepyfile(test_suite=LEAK_THEN_CHECK)
    result = ourtester.runpytest()
    result.assert_outcomes(passed=2, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard --cudagraph-guard: the quick 'nothing "
            "changed' check * unavailable on torch *: torch._inductor.config.__class__ cannot be "
            "swapped (__class__ assignment*",
            "*CudagraphConfigLeakWarning: test_suite.py::test_leaks leaked 1 *",
        ]
    )


def test_what_torch_raises_is_not_a_bug_of_ours() -> None:
    def torch_side() -> None:
        {}["_config"]

    with pytest.raises(KeyError) as raised:
        torch_side()
    assert not raised_by_us(raised.value)
    with pytest.raises(AttributeError) as ours:
        diff.restore(None)  # type: ignore[arg-type]
    assert raised_by_us(ours.value)
