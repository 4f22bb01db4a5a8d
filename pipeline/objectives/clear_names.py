"""CLEAR's operation names and the rule an augmentation's name follows: a leaf, importing nothing of this
project's, so that the config (pipeline.augment.config, pipeline.train.config) checks a name by the rule the
augmentation applies (pipeline.objectives.clear_operations)."""

from __future__ import annotations

OPERATIONS = ("del-word", "del-span", "reorder", "subs")


def unknown_augmentation(name: str) -> str | None:
    """What is wrong with `name` as a CLEAR augmentation (one of OPERATIONS, or two different ones joined by
    '+'), or None."""
    ops = name.split("+")
    if len(ops) in (1, 2) and len(set(ops)) == len(ops) and set(ops) <= set(OPERATIONS):
        return None
    return (
        f"unknown CLEAR augmentation {name!r}: use one of {', '.join(OPERATIONS)}, "
        f"or two different ones joined by '+' (e.g. subs+del-span)"
    )
