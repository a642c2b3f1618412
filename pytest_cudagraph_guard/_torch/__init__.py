"""The one place that touches torch internals and the differences between its releases.

One module per part of torch it touches; the rest of the plugin imports each module where it is
used (inside a function where the module is not needed at start-up), so that a session loads
only the parts of the boundary it needs.

Nothing here imports torch at module level: every function that needs torch takes it from
``sys.modules`` or imports it on demand (``runtime.import_torch``), so that loading the plugin
stays free. Every torch attribute the plugin replaces is a row of ``patch_table.PATCHES``; where
one fails, ``faults`` stops only its part.
"""
