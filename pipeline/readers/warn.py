"""A warning about the evaluation data, said once a process. A leaf of the readers, so that a reader (BEIR's) and the
task kinds (pipeline.evaluate.kind) share one record of what was said."""

from __future__ import annotations

import logging

log = logging.getLogger("cpipe")
_said: set[str] = set()


def warn_once(message: str) -> None:
    """The data is found several times a run (the check before any work, the data's fingerprint, the scoring): say
    each warning once."""
    if message not in _said:
        _said.add(message)
        log.warning(message)
