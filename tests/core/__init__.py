"""Tests of core/: the options and what loading the plugin imports."""
