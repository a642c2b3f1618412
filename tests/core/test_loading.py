"""Loading the plugin declares it and imports little; a session loads each feature only when it
shows that it needs it; the public names load on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pytest_cudagraph_guard

PACKAGE = "pytest_cudagraph_guard"
MOST_MODULES_AT_LOAD = 10
# What a session that uses no marker, option, fixture or report of the plugin never needs.
FEATURES = (
    f"{PACKAGE}.report.plugin",
    f"{PACKAGE}.report.writer",
    f"{PACKAGE}.isolation.plugin",
    f"{PACKAGE}.isolation.pool",
    f"{PACKAGE}.threads.plugin",
    f"{PACKAGE}.threads.run",
    f"{PACKAGE}.suite",
    f"{PACKAGE}._torch.observe",
    f"{PACKAGE}._torch.config_access",
    f"{PACKAGE}._torch.patches",
    f"{PACKAGE}.diagnosis",
    f"{PACKAGE}.guard.config_guard",
)


def _imported_by(statement: str) -> list[str]:
    """The modules that ``statement`` leaves imported in a fresh interpreter, beyond those of
    the interpreter's start (``-X importtime`` misses those imported through ``importlib``)."""
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; before = set(sys.modules); "
            f"{statement}; "
            "print('\\n'.join(sorted(set(sys.modules) - before)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.split()


@pytest.mark.processes
def test_loading_the_plugin_imports_few_of_its_modules_and_no_torch() -> None:
    imported = _imported_by("import pytest_cudagraph_guard.plugin")
    ours = [name for name in imported if name.split(".")[0] == PACKAGE]
    assert f"{PACKAGE}.plugin" in ours
    assert len(ours) <= MOST_MODULES_AT_LOAD, ours
    assert [name for name in imported if name.split(".")[0] == "torch"] == []
    assert not set(ours) & set(FEATURES), ours


@pytest.mark.processes
def test_the_package_loads_its_public_names_on_first_use() -> None:
    imported = _imported_by(
        "import pytest_cudagraph_guard as p, sys; "
        "assert p.CudagraphGuardWarning.__name__ == 'CudagraphGuardWarning'; "
        f"assert {FEATURES[-1]!r} not in sys.modules"
    )
    ours = [name for name in imported if name.split(".")[0] == PACKAGE]
    assert sorted(ours) == [PACKAGE, f"{PACKAGE}.core", f"{PACKAGE}.core.warnings"]


@pytest.mark.parametrize("name", pytest_cudagraph_guard.__all__)
def test_each_public_name_of_the_package_is_found(name: str) -> None:
    assert getattr(pytest_cudagraph_guard, name) is not None
    assert name in dir(pytest_cudagraph_guard)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_name'"):
        _ = pytest_cudagraph_guard.no_such_name  # type: ignore[attr-defined]


def test_a_session_that_asks_nothing_of_the_plugin_loads_no_feature(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        f"""
        import sys

        FEATURES = {FEATURES!r}

        def pytest_unconfigure(config):
            loaded = [name for name in FEATURES if name in sys.modules]
            print("FEATURES-LOADED:", ",".join(loaded) or "none")
        """
    )
    ourtester.makepyfile(
        """
        import os

        def test_plain():
            pass

        def test_env_leak_is_still_guarded():
            os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"
        """
    )
    result = ourtester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["FEATURES-LOADED: none"])


@pytest.mark.wide
def test_a_marked_test_loads_its_feature(ourtester: pytest.Pytester) -> None:
    """The other side of the test above: its conftest sees a feature that loads."""
    ourtester.makeconftest(
        """
        import sys

        def pytest_unconfigure(config):
            print("THREADS-LOADED:", "pytest_cudagraph_guard.threads.run" in sys.modules)
        """
    )
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread
        def test_marked():
            pass
        """
    )
    result = ourtester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["THREADS-LOADED: True"])


@pytest.mark.wide
def test_the_plugins_modules_load_through_pythons_importer(ourtester: pytest.Pytester) -> None:
    """pytest rewrites the asserts of every installed plugin's modules through its own importer;
    the plugin's have none for it (the package's ``__init__``, loaded first, takes them off),
    and the user's tests are still rewritten."""
    ourtester.makepyfile(
        f"""
        import sys

        from _pytest.assertion.rewrite import AssertionRewritingHook

        def test_the_plugins_modules():
            ours = [m for n, m in sys.modules.items() if n.startswith("{PACKAGE}.")]
            assert len(ours) > 3
            assert [m for m in ours if isinstance(m.__loader__, AssertionRewritingHook)] == []

        def test_the_users_asserts_are_rewritten():
            assert [1, 2] == [1, 3]
        """
    )
    result = ourtester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*At index 1 diff: 2 != 3*"])


def test_a_second_session_that_names_the_plugin_warns_of_no_rewriting(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process imported the plugin without pytest's rewriting; a session that names it
    with ``-p`` (as where no entry point is installed) is not told it could not rewrite it."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest_inprocess(
        "-p", f"{PACKAGE}.plugin", "-W", "error::pytest.PytestAssertRewriteWarning"
    )
    result.assert_outcomes(passed=1)
    assert "cannot be rewritten" not in result.stdout.str()


@pytest.mark.wide
def test_an_xdist_worker_of_a_reporting_session_loads_the_wire_not_the_writer(
    ourtester: pytest.Pytester,
) -> None:
    """A worker sends its records to the controller, which writes the report."""
    ourtester.makeconftest(
        """
        import sys
        from pathlib import Path

        def pytest_unconfigure(config):
            if hasattr(config, "workerinput"):
                loaded = [name for name in sys.modules if ".report." in name]
                (Path(__file__).parent / "worker-loaded.txt").write_text(" ".join(loaded))
        """
    )
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest_subprocess(
        "-n", "1", "--cudagraph-report", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    loaded = set((ourtester.path / "worker-loaded.txt").read_text().split())
    assert f"{PACKAGE}.report.wire" in loaded
    assert not {f"{PACKAGE}.report.writer", f"{PACKAGE}.report.render"} & loaded
