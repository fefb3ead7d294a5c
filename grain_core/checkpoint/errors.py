"""Errors raised when a checkpoint cannot be written or restored."""

from __future__ import annotations

from grain_core.state import StateMismatchError


class CheckpointError(ValueError):
    """A checkpoint cannot be restored; the iterator is left as it was."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The directory holds no iterator state file."""


class CheckpointFormatError(CheckpointError):
    """The state file is truncated, corrupted, or of an unknown format or version."""


class CheckpointProcessCountError(CheckpointError):
    """The checkpoint was written by a different number of JAX processes (or mp workers)."""


class CheckpointPipelineMismatchError(CheckpointError, StateMismatchError):
    """The saved state belongs to a different pipeline than the iterator restored into."""
