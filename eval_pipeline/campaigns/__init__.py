"""The built-in campaign files (YAML), found by name."""

__all__: list[str] = []
