"""Errors caused by the user's input (files, data, configuration).

The CLI prints these as one line, without a traceback; anything else is a bug.
"""

from storage import DatasetError


class InputError(ValueError):
    pass


class ConfigError(InputError):
    """A configuration problem, already phrased for the user."""


# Bad input (a file, a row, a key) and a damaged or unreadable dataset: phrased for the user, one line says it
# all, so the CLI and a failed flow run's state message show it without a traceback.
USER_ERRORS = (InputError, DatasetError)
