"""Errors caused by the user's input (files, data, configuration).

The CLI prints these as one line, without a traceback; anything else is a bug.
"""


class InputError(ValueError):
    pass


class ConfigError(InputError):
    """A configuration problem, already phrased for the user."""
