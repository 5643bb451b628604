"""Small text helpers shared by configuration and views: `${VAR}` values read from the environment, and text
cut to a length that says how much was left out."""

import os
import re

__all__ = ["TRAJECTORY_TEXT_CHARS", "counted", "from_environment", "truncate"]

# What a trajectory keeps of each message and tool output: enough to read, bounded for the store.
TRAJECTORY_TEXT_CHARS = 4000


def from_environment(value: str) -> str:
    """`${NAME}` or `${NAME:-default}` read from the environment when the campaign is loaded, so the resolved
    value (the model an endpoint serves) is what the variant's config, and its hash, hold; any other value
    as it is."""
    match = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}", value)
    if not match:
        return value
    name, default = match.groups()
    resolved = os.environ.get(name) or default
    if resolved is None:
        raise ValueError(f"{value}: the variable {name} is not set")
    return resolved


def truncate(text: str, limit: int = TRAJECTORY_TEXT_CHARS) -> str:
    """The text's first `limit` characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def counted(number: int, noun: str) -> str:
    """`1 instance`, `16 instances`: a count with its noun in the number it takes."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
