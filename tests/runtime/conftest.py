"""Fixtures for the runtime tests: the tiny data set and ``run_train`` (tests/helpers/fixtures.py, shared with
the hierarchy and other folders)."""
