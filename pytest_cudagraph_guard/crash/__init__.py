"""What turns a dead test process, a dead xdist worker or a dead session into a report.

:mod:`.death` makes a process's end the test's failure, from its exit status, its journal
(:mod:`.journal`: the test and the CUDA-graph work it was doing) and the fault handler's stacks
(:mod:`.stacks`). :mod:`.activity_journal` keeps the journal of the session's own process. None of
:mod:`.death`, :mod:`.journal` and :mod:`.stacks` imports torch or a feature: test processes, the
parent and xdist's controller all read them.
"""
