"""User-facing errors.

Every error that bad input can cause derives from :class:`DareError`. The CLI prints its message as
one paragraph, without a traceback, and exits with status 2. Messages name the offending field (a
dotted YAML path such as ``algorithm.params.clip_eps``) and say what would be accepted.
"""

from __future__ import annotations

__all__ = ["DareError", "SpecError", "PluginError", "CheckpointError", "DataError"]


class DareError(Exception):
    """A problem with the user's input or environment, explained in one paragraph."""


class SpecError(DareError):
    """The run spec is invalid. ``problems`` holds ``(yaml_path, message)`` pairs.

    The message is ``invalid run spec in SOURCE: path: message`` for one problem; for several, the heading
    ``invalid run spec in SOURCE:`` then one indented line ``  path: message`` per problem."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{loc}: {msg}" if loc else msg for loc, msg in self.problems]
        if len(lines) == 1:
            super().__init__(f"invalid run spec{where}: {lines[0]}")
        else:  # one problem per line, indented under the heading (one paragraph: no blank line)
            super().__init__(f"invalid run spec{where}:" + "".join(f"\n  {line}" for line in lines))


class PluginError(DareError):
    """Plugins could not be loaded or two plugins register the same component name."""


class CheckpointError(DareError):
    """A model directory or checkpoint is missing files or does not match its config."""


class DataError(DareError):
    """A dataset file is missing, unreadable, or lacks a needed column."""
