"""--cudagraph-guard: leaks of torch config and environment between tests, in real sessions."""

from __future__ import annotations

import importlib.util

import pytest

from pytest_cudagraph_guard._torch.cudagraph_settings import config_is_process_wide

from ..conftest import QUIET_INI

LEAKY_SUITE = """
    import os
    import torch._inductor.config as ic

    def test_leaks():
        ic.triton.cudagraphs = True
        os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"

    def test_next():
        assert ic.triton.cudagraphs is False
        assert "TORCHINDUCTOR_MAX_AUTOTUNE" not in os.environ
    """


def test_warn_is_the_default_and_names_test_key_and_values(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=LEAKY_SUITE)
    result = ourtester.runpytest()
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphConfigLeakWarning: test_suite.py::test_leaks leaked 2 *(restored)*",
            "*torch._inductor.config.triton.cudagraphs: False -> True",
            "*$TORCHINDUCTOR_MAX_AUTOTUNE: <unset> -> '1'",
        ]
    )


def test_restore_mode_restores_silently(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=LEAKY_SUITE)
    result = ourtester.runpytest("--cudagraph-guard=restore")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*CudagraphConfigLeakWarning*")


def test_fail_mode_errors_the_leaking_test_at_teardown(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=LEAKY_SUITE)
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaks*",
            "*cudagraph_guard: test_suite.py::test_leaks leaked 2 *",
            "*triton.cudagraphs: False -> True",
        ]
    )


def test_off_mode_neither_restores_nor_warns(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._inductor.config as ic

        def test_leaks():
            ic.triton.cudagraphs = True

        def test_next_sees_the_leak():
            assert ic.triton.cudagraphs is True
            ic.triton.cudagraphs = False
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=off")
    result.assert_outcomes(passed=2)


def test_ini_option_sets_the_mode(ourtester: pytest.Pytester) -> None:
    ourtester.makeini(QUIET_INI + "cudagraph_guard = fail\n")
    ourtester.makepyfile(test_suite=LEAKY_SUITE)
    ourtester.runpytest().assert_outcomes(passed=2, errors=1)
    ourtester.runpytest("--cudagraph-guard=restore").assert_outcomes(passed=2)


def test_bad_option_value_is_a_usage_error_naming_it(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--cudagraph-guard=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cudagraph-guard: invalid choice: 'maybe'*"])


def test_bad_ini_value_is_a_usage_error_naming_it(ourtester: pytest.Pytester) -> None:
    ourtester.makeini(QUIET_INI + "cudagraph_guard = maybe\n")
    result = ourtester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini option cudagraph_guard: expected restore, warn, fail or off, got 'maybe'*"]
    )


def test_warning_obeys_w_error(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=LEAKY_SUITE)
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphConfigLeakWarning")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*CudagraphConfigLeakWarning: test_suite.py::test_leaks*"])
    error = result.stdout.str().split("ERROR at teardown", 1)[1].split("=====", 1)[0]
    assert "guard/plugin.py" not in error
    assert len(error.splitlines()) <= 10, error


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        pytest.param("del ic.triton.cudagraph_trees", "True -> <deleted>", id="del"),
        pytest.param(
            "monkeypatch.setattr(ic.triton, 'cudagraph_trees', False)",
            "triton.cudagraph_trees: True -> *",
            id="monkeypatch-undo",
        ),
        pytest.param(
            "ic._config['triton.cudagraphs'].default = True",
            "triton.cudagraphs: False -> True",
            id="changed-default",
        ),
        pytest.param(
            "ic.pre_grad_fusion_options['leaked'] = {}",
            "pre_grad_fusion_options: {} -> {'leaked': {}}",
            id="dict-mutated-in-place",
        ),
        pytest.param(
            "ic.post_grad_fusion_options.setdefault('x', {})",
            "post_grad_fusion_options: {} -> {'x': {}}",
            id="setdefault",
        ),
        pytest.param(
            "import torch._dynamo.config as dc; dc.suppress_errors = True",
            "torch._dynamo.config.suppress_errors: False -> True",
            id="dynamo",
        ),
        pytest.param(
            "os.environ['TORCH_COMPILE_DEBUG'] = '1'",
            "$TORCH_COMPILE_DEBUG: <unset> -> '1'",
            id="env-set",
        ),
        pytest.param(
            "os.environ.pop('TORCHDYNAMO_PRESET')",
            "$TORCHDYNAMO_PRESET: 'x' -> <unset>",
            id="env-deleted",
        ),
    ],
)
def test_every_kind_of_leak_is_seen_and_restored(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str, shown: str
) -> None:
    monkeypatch.setenv("TORCHDYNAMO_PRESET", "x")
    ourtester.makepyfile(
        f"""
        import os
        import torch._inductor.config as ic
        import torch._dynamo.config as dc

        BEFORE = (ic.get_hash(), ic.save_config(), dc.get_hash())

        def test_leaks(monkeypatch):
            {body}

        def test_everything_is_back():
            assert (ic.get_hash(), ic.save_config(), dc.get_hash()) == BEFORE
            assert ic.triton.cudagraph_trees is True and ic.triton.cudagraphs is False
            assert ic.pre_grad_fusion_options == {{}} and ic.post_grad_fusion_options == {{}}
            assert dc.suppress_errors is False
            assert "TORCH_COMPILE_DEBUG" not in os.environ
            assert os.environ["TORCHDYNAMO_PRESET"] == "x"
            assert ic._config["triton.cudagraphs"].default is False
        """
    )
    result = ourtester.runpytest()
    if body.startswith("monkeypatch") and pytest.version_tuple < (9, 2):
        # before pytest 9.2 the undo assigns the old value back: no change is left
        result.assert_outcomes(passed=2)
        return
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines([f"*{shown}"])


def test_changes_that_are_undone_are_not_leaks(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._inductor.config as ic

        def test_fixture(inductor_config, dynamo_config, cudagraphs):
            inductor_config["max_autotune"] = True
            dynamo_config["suppress_errors"] = True

        def test_patch_block():
            with ic.patch({"triton.cudagraphs": True}):
                pass

        def test_reading_a_mutable_key():
            assert ic.pre_grad_fusion_options == {}

        def test_monkeypatch_setenv(monkeypatch):
            monkeypatch.setenv("TORCHINDUCTOR_FOO", "1")

        def test_unrelated_env(monkeypatch):
            import os
            os.environ["UNRELATED_TO_TORCH"] = "1"
            del os.environ["UNRELATED_TO_TORCH"]
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=5)


def test_shared_fixtures_may_change_config_for_their_scope(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.config as ic

        @pytest.fixture(scope="module")
        def cudagraphs_for_module():
            ic.triton.cudagraphs = True
            yield
            ic.triton.cudagraphs = False

        def test_a(cudagraphs_for_module):
            assert ic.triton.cudagraphs is True

        def test_b_leaks(cudagraphs_for_module):
            assert ic.triton.cudagraphs is True
            ic.max_autotune = True

        def test_c(cudagraphs_for_module):
            assert ic.triton.cudagraphs is True and ic.max_autotune is False

        def test_d():
            assert ic.triton.cudagraphs is True
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_b_leaks*", "*max_autotune: False -> True"]
    )


@pytest.mark.wide
def test_torch_imported_during_a_test_is_compared_with_its_defaults(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import sys

        def test_imports_only():
            assert "torch" not in sys.modules
            import torch._inductor.config

        def test_imports_and_sets():
            import torch._inductor.config as ic
            ic.triton.cudagraphs = True

        def test_later():
            import torch._inductor.config as ic
            assert ic.triton.cudagraphs is False
        """
    )
    result = ourtester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, warnings=1)
    result.stdout.fnmatch_lines(["*test_imports_and_sets leaked 1 *", "*cudagraphs: False -> True"])


@pytest.mark.wide
def test_same_warnings_under_xdist(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_one=LEAKY_SUITE,
        test_two="""
        import torch._dynamo.config as dc

        def test_leaks_too():
            dc.suppress_errors = True
        """,
    )
    result = ourtester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, warnings=2)
    result.stdout.fnmatch_lines_random(
        [
            "*CudagraphConfigLeakWarning: test_one.py::test_leaks leaked 2 *",
            "*CudagraphConfigLeakWarning: test_two.py::test_leaks_too leaked 1 *",
            "*torch._dynamo.config.suppress_errors: False -> True",
        ]
    )


NO_ASYNCIO = ("-p", "no:asyncio") if importlib.util.find_spec("pytest_asyncio") else ()
SNAPSHOT_COUNTING_CONFTEST = """
import torch._inductor.config
import torch._inductor.cudagraph_trees
from pytest_cudagraph_guard._torch import config_access

SNAPSHOTS = []
original = config_access.ConfigAccess.snapshot

def counting(self):
    SNAPSHOTS.append(self.name)
    return original(self)

def pytest_configure(config):
    config_access.ConfigAccess.snapshot = counting

def pytest_unconfigure(config):
    config_access.ConfigAccess.snapshot = original
    print(f"SNAPSHOTS={len(SNAPSHOTS)}")
"""


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        # one baseline of two modules, then one restore and one new baseline for the leak
        pytest.param("", 6, id="plain"),
        # the same: the marker's threads leave nothing for the guard to look at
        pytest.param(
            "@pytest.mark.cudagraph_thread\n",
            6,
            id="cudagraph_thread",
            marks=pytest.mark.skipif(
                config_is_process_wide(),
                reason="torch <= 2.11: the marker's settings are process-wide writes, which the "
                "guard takes in with a snapshot before and after",
            ),
        ),
    ],
)
def test_tests_that_change_nothing_cost_no_snapshot(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, marker: str, expected: int
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # as in a session that is not nested in another
    ourtester.makeconftest(SNAPSHOT_COUNTING_CONFTEST)
    ourtester.makepyfile(
        "import pytest\n"
        + "".join(f"{marker}def test_{i}():\n    pass\n" for i in range(50))
        + "def test_leak():\n    import torch._inductor.config as ic\n"
        + "    ic.max_autotune = True\n"
    )
    # pytest-asyncio's shared event-loop fixtures add a few per session, not per test.
    result = ourtester.runpytest("-s", "--cudagraph-guard=restore", *NO_ASYNCIO)
    result.assert_outcomes(passed=51)
    result.stdout.fnmatch_lines([f"SNAPSHOTS={expected}"])


def test_a_guard_that_cannot_read_torch_turns_off_with_a_warning(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import torch._inductor.config
        from pytest_cudagraph_guard._torch import config_access

        original = config_access.ConfigAccess.snapshot

        def unknown_layout(self):
            raise RuntimeError("a torch config layout this plugin does not know")

        def pytest_configure(config):
            config_access.ConfigAccess.snapshot = unknown_layout

        def pytest_unconfigure(config):
            config_access.ConfigAccess.snapshot = original
        """
    )
    ourtester.makepyfile(
        """
        import torch._inductor.config as ic

        def test_leaks():
            ic.max_autotune = True

        def test_later():
            ic.max_autotune = False
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard could not check torch's config "
            "(RuntimeError: a torch config layout this plugin does not know)*",
        ]
    )
