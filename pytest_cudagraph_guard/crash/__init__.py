"""What turns a dead test process, a dead xdist worker or a dead session into a report.

:mod:`.exit_state` reads how far a process is on its way out, and waits for its end through its
dying (a core dump, threads still ending). :mod:`.death` makes a process's end the test's
failure, from its exit status, its journal (:mod:`.journal`: the test and the CUDA-graph work it
was doing) and the fault handler's stacks (:mod:`.stacks`). :mod:`.activity_journal` keeps the
journal of the session's own process. None of :mod:`.exit_state`, :mod:`.death`,
:mod:`.journal` and :mod:`.stacks` imports torch or a feature: test processes, the parent and
xdist's controller all read them.
"""
