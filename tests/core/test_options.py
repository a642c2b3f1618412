"""Every option and ini key of the plugin, resolved once: the command line, else the ini file,
else the default, each with where it came from, as the report's options show them; a bad value
is one usage error naming the option or ini key."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ..conftest import QUIET_INI
from ..helpers import before_the_summary, read_report

ONE_TEST = "def test_one():\n    pass\n"
REPORT = "--cudagraph-report=json:r.json"

DEFAULTS: dict[str, Any] = {
    "guard": "warn",
    "report": ["json:r.json"],
    "threads": 0,
    "tls": "native",
    "subprocess": False,
    "on": False,
    "timeout": None,
    "fail_on": [],
    "cuda_ahead": True,
    "spares": None,
    "process_env": {},
    "gpus": "auto",
}

# Every option and ini key given, each value other than its default.
GIVEN: dict[str, Any] = {
    "guard": "restore",
    "report": ["json:r.json"],
    "threads": 2,
    "tls": "init",
    "subprocess": True,
    "on": True,
    "timeout": 30.0,
    "fail_on": ["leak", "tls-missing"],
    "cuda_ahead": False,
    "spares": 0,
    "process_env": {"CGG_ONE": "1", "CGG_TWO": "a=b"},
    "gpus": "off",  # a count or indices would be checked against this machine's GPUs: none
}
COMMAND_LINE = [
    "--cudagraph-guard=restore",
    REPORT,
    "--cudagraph-threads=2",
    "--cudagraph-tls=init",
    "--cudagraph-subprocess",
    "--cudagraph-on",
    "--cudagraph-timeout=30",
    "--cudagraph-fail-on=leak,tls-missing",
    "--cudagraph-gpus=off",
]
INI_ONLY = "cudagraph_cuda_ahead = no\ncudagraph_spares = 0\ncudagraph_process_env =\n" + (
    "    CGG_ONE=1\n    CGG_TWO = a=b\n"
)
INI = INI_ONLY + (
    "cudagraph_guard = restore\n"
    "cudagraph_report = json:r.json\n"
    "cudagraph_threads = 2\n"
    "cudagraph_tls = init\n"
    "cudagraph_subprocess = true\n"
    "cudagraph_on = 1\n"
    "cudagraph_timeout = 30\n"
    "cudagraph_fail_on = leak tls-missing\n"
    "cudagraph_gpus = off\n"
)


def _options(tester: pytest.Pytester, *args: str, ini: str = "") -> dict[str, Any]:
    tester.makeini(QUIET_INI + ini)
    tester.makepyfile(ONE_TEST)
    result = tester.runpytest("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    options: dict[str, Any] = read_report(tester.path / "r.json")["environment"]["options"]
    return options


def test_nothing_given_is_the_defaults(pytester: pytest.Pytester) -> None:
    options = _options(pytester, REPORT)
    origins = options.pop("origins")
    assert options == DEFAULTS
    assert origins == {**dict.fromkeys(DEFAULTS, "default"), "report": "--cudagraph-report"}


@pytest.mark.wide
def test_each_option_from_the_command_line(pytester: pytest.Pytester) -> None:
    options = _options(pytester, *COMMAND_LINE, ini=INI_ONLY)
    origins = options.pop("origins")
    assert options == GIVEN
    assert origins == {
        name: f"ini option cudagraph_{name}"
        if name in ("cuda_ahead", "spares", "process_env")
        else "--cudagraph-" + name.replace("_", "-")
        for name in GIVEN
    }


@pytest.mark.wide
def test_each_ini_key_and_the_command_line_wins(pytester: pytest.Pytester) -> None:
    options = _options(pytester, "--cudagraph-threads=3", ini=INI)
    origins = options.pop("origins")
    assert options == {**GIVEN, "threads": 3}
    assert origins == {
        **{name: f"ini option cudagraph_{name}" for name in GIVEN},
        "threads": "--cudagraph-threads",
    }


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        (
            "cudagraph_subprocess = maybe",
            "cudagraph_subprocess: expected true or false, got 'maybe'",
        ),
        (
            "cudagraph_cuda_ahead = maybe",
            "cudagraph_cuda_ahead: expected true or false, got 'maybe'",
        ),
        ("cudagraph_on = perhaps", "cudagraph_on: expected true or false, got 'perhaps'"),
        (
            "cudagraph_guard = loud",
            "cudagraph_guard: expected restore, warn, fail or off, got 'loud'",
        ),
        ("cudagraph_threads = two", "cudagraph_threads: expected a whole number of threads"),
        ("cudagraph_threads = \u00b2", "cudagraph_threads: expected a whole number of threads"),
        ("cudagraph_tls = lazy", "cudagraph_tls: expected native or init, got 'lazy'"),
        ("cudagraph_timeout = -1", "cudagraph_timeout: expected a positive number of seconds"),
        ("cudagraph_fail_on = nope", "cudagraph_fail_on: unknown kind(s) 'nope'; known kinds"),
        ("cudagraph_spares = many", "cudagraph_spares: expected auto or a whole number"),
        ("cudagraph_spares = \u00b2", "cudagraph_spares: expected auto or a whole number"),
        ("cudagraph_report = yaml", "cudagraph_report: unknown report format 'yaml'"),
        (
            "cudagraph_process_env = JUST_A_NAME",
            "cudagraph_process_env: expected lines of NAME=VALUE",
        ),
        ("cudagraph_process_env = 2BAD=1", "cudagraph_process_env: expected lines of NAME=VALUE"),
        ("cudagraph_gpus = -1", "cudagraph_gpus: expected auto, off, a positive number of GPUs"),
        ("cudagraph_gpus = 0", "cudagraph_gpus: expected auto, off, a positive number of GPUs"),
        ("cudagraph_gpus = two", "cudagraph_gpus: expected auto, off, a positive number of GPUs"),
        ("cudagraph_gpus = 1.5", "cudagraph_gpus: expected auto, off, a positive number of GPUs"),
        ("cudagraph_gpus = 0,x", "cudagraph_gpus: expected auto, off, a positive number of GPUs"),
        ("cudagraph_gpus = 1,1", "cudagraph_gpus: device index given twice in '1,1'"),
        (
            "cudagraph_gpus = \u00b2",
            "cudagraph_gpus: expected auto, off, a positive number of GPUs",
        ),
        (
            "cudagraph_gpus = 1,\u00b2",
            "cudagraph_gpus: expected auto, off, a positive number of GPUs",
        ),
    ],
)
def test_a_bad_ini_value_is_one_usage_error_naming_the_key(
    pytester: pytest.Pytester, ini: str, message: str
) -> None:
    pytester.makeini(f"{QUIET_INI}{ini}\n")
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = result.stderr.str()
    assert error.count(f"ini option {message}") == 1, error
    assert error.count("ERROR") == 1, error


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("--cudagraph-threads=x", "--cudagraph-threads: expected a whole number of threads"),
        ("--cudagraph-tls=later", "--cudagraph-tls: expected native or init, got 'later'"),
        ("--cudagraph-timeout=inf", "--cudagraph-timeout: expected a positive number of seconds"),
        ("--cudagraph-report=xml", "--cudagraph-report: unknown report format 'xml'"),
    ],
)
def test_a_bad_option_value_is_one_usage_error_naming_the_option(
    ourtester: pytest.Pytester, argument: str, message: str
) -> None:
    ourtester.makepyfile(ONE_TEST)
    result = ourtester.runpytest(argument)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().count(message) == 1, result.stderr.str()


@pytest.mark.parametrize(
    ("marker", "argument"),
    [
        ("cudagraph_thread(threads=0)", "argument 'threads' must be a positive int, got 0"),
        ("cudagraph_subprocess(env={'A': 1})", "argument 'env' must be a str->str mapping"),
        ("cudagraph_thread(switches=False)", "unknown argument 'switches'"),
    ],
)
def test_a_bad_marker_argument_is_one_message_once(
    ourtester: pytest.Pytester, marker: str, argument: str
) -> None:
    ourtester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.{marker}
        def test_body():
            pass
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(errors=1)
    output = result.stdout.str()
    assert before_the_summary(output).count(argument) == 1, output
    assert "During handling of the above exception" not in output
    assert f"test_bad.py::test_body: @pytest.mark.{marker.partition('(')[0]}: " in output


@pytest.mark.parametrize(
    ("marks", "message"),
    [
        (
            ["cudagraph_main_thread(3)"],
            "@pytest.mark.cudagraph_main_thread: takes no arguments, got 3",
        ),
        (
            ["cudagraph_main_thread(reason='signals')"],
            "@pytest.mark.cudagraph_main_thread: takes no arguments, got reason='signals'",
        ),
        (
            ["cudagraph_main_thread", "cudagraph_thread(2)"],
            "@pytest.mark.cudagraph_main_thread: cannot be combined with "
            "@pytest.mark.cudagraph_thread on one test",
        ),
        (
            ["cudagraph_subprocess", "cudagraph_main_thread"],
            "@pytest.mark.cudagraph_main_thread: cannot be combined with "
            "@pytest.mark.cudagraph_subprocess on one test",
        ),
        (
            ["cudagraph_subprocess(env={'1X': 'a'})"],
            "@pytest.mark.cudagraph_subprocess: argument 'env': '1X' is not a variable name "
            "(letters, digits and _, not starting with a digit)",
        ),
    ],
)
def test_a_misused_marker_errors_that_test_once_naming_it(
    ourtester: pytest.Pytester, marks: list[str], message: str
) -> None:
    decorators = "".join(f"@pytest.mark.{mark}\n" for mark in marks)
    ourtester.makepyfile(
        test_bad=f"""
import threading
import pytest

RAN = []

{decorators}def test_body():
    RAN.append(threading.current_thread().name)

def test_beside_it():
    assert RAN == []
"""
    )
    result = ourtester.runpytest()
    result.assert_outcomes(errors=1, passed=1)
    output = result.stdout.str()
    assert before_the_summary(output).count(f"test_bad.py::test_body: {message}") == 1, output
    assert "During handling of the above exception" not in output


def test_a_marker_env_name_follows_the_process_env_rule(ourtester: pytest.Pytester) -> None:
    """The ini key and the marker reject the same names, in the same words."""
    ourtester.makeini("[pytest]\ncudagraph_process_env = 1X=a\n")
    ourtester.makepyfile(ONE_TEST)
    result = ourtester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*cudagraph_process_env*(NAME: letters, digits and _, not starting with a digit)*"]
    )


def test_the_help_lists_each_option_and_ini_key(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--help")
    text = result.stdout.str()
    for name in DEFAULTS:
        key = f"cudagraph_{name}"
        assert f"{key} (" in text, key
        if name not in ("cuda_ahead", "spares", "process_env"):
            assert "--cudagraph-" + name.replace("_", "-") in text, name
    assert "--cudagraph-settings" in text


def test_the_help_gives_the_default_of_each_option_that_takes_a_value(
    ourtester: pytest.Pytester,
) -> None:
    text = ourtester.runpytest("--help").stdout.str()
    options = re.split(r"\n  (?=--cudagraph-)", text.split("\n\n[pytest] ini-options")[0])
    taking_a_value = [
        block for block in options if block.startswith("--cudagraph-") and "=" in block.split()[0]
    ]
    assert len(taking_a_value) >= 6
    for block in taking_a_value:
        assert "default" in " ".join(block.split()).lower(), block
