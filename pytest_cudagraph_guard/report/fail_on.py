"""``--cudagraph-fail-on``: the entries of a test's record whose kind the session fails on,
read by :mod:`.plugin` at the test's teardown."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Final

from ..core.options import CUDAGRAPH_SKIP, LEAK, option_flag
from ..core.records import TestRecord

OPTION: Final = option_flag("fail_on")


def findings(record: TestRecord, kinds: Collection[str]) -> list[str]:
    """One line per entry of a kind in ``kinds``: the kind, the thread and the detail."""
    found = [
        f"{error['kind']} in thread {error['thread']}: {error['type']}: {error['message']}"
        for error in record["errors"]
        if error["kind"] in kinds
    ]
    if LEAK in kinds:
        main = threading.main_thread().name
        found += [
            f"{LEAK} in thread {main}: {leak['key']}: {leak['before']!r} -> {leak['after']!r}"
            for leak in record["leaks"]
        ]
    if CUDAGRAPH_SKIP in kinds:
        found += [
            f"{CUDAGRAPH_SKIP} in thread {skip['thread']}: {skip['reason']}"
            for skip in record["activity"]["skips"]
        ]
    return found


def failure_text(nodeid: str, lines: list[str]) -> str:
    return "\n".join([f"{OPTION}: {nodeid} holds {len(lines)} entry(ies) to fail on:", *lines])
