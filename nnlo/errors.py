"""Errors a user can act on. Each message is one line that names the problem and the fix."""
from __future__ import annotations

from nnlo.contract import EXIT_BAD_INPUT, EXIT_FAILED


class NnloError(Exception):
    """Bad input or a failed run: shown to the user as one line, never as a traceback."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(NnloError):
    """An option, file or profile is wrong."""


class DataError(NnloError):
    """A data list, HDF5 file or dataset is missing or malformed."""


class ModelError(NnloError):
    """A model module or saved model cannot be loaded or raised while building/training."""


class TrainingError(NnloError):
    """Training diverged (NaN/inf loss) or a rank failed."""

    exit_code = EXIT_FAILED
