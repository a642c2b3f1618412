"""Tests of crash/: a dead test process or xdist worker turned into its test's report."""
