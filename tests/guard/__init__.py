"""Tests of guard/: the leak guard, its config state and diff, and the config fixtures."""
