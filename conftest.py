"""Fixtures for every test of the repository (core and plugins).

Each test runs in its own empty working directory, so a relative path in a spec or a command
(``runs/...``, ``./schemas``) never reads or writes the checkout: a user's own ``runs/`` (from
``dare run examples/...``) cannot change a test's outcome, and no test leaves files in the repository.
Tests address repository files through ``dare.testing.repo_root()``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
