"""``--cudagraph-report``: per test, the effective settings, the CUDA-graph work that really
happened, and every thread/TLS error, named and explained.

:mod:`.plugin` collects each test's record where it runs; :mod:`.writer` gathers the records and
writes them out, in the forms :mod:`.render` makes. Importing this package imports nothing else.
"""
