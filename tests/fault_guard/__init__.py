"""Tests of the fault guard: a failure of the plugin's own code never changes an outcome."""
