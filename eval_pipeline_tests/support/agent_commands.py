"""Commands a command agent runs, made for the tests' agents."""

import shlex


def appending(path: str, addition: str) -> str:
    """A command agent's command that appends `addition` to the file at `path`."""
    return f"printf '%s' {shlex.quote(addition)} >> {shlex.quote(path)}"
