"""How configuration files are checked: strict pydantic models, file paths, and errors a person can act on.

Every section of a campaign file is a model that forbids unknown fields, so a
typo fails when the file is loaded, not when a run reaches the field. A
validation error becomes one line per problem: the field's path as written in
the file (`slices.terminal.pth`), what was expected and what was found, and
for an unknown field the allowed ones, with the closest as a suggestion.

Paths in a configuration file are relative to the file (`InputPath`, `OutputPath`), or
name a resource shipped with eval_pipeline (`builtin:demo_tasks`), so a copied
file keeps working, and a missing file fails at load with its resolved path.
"""

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainValidator,
    Strict,
    ValidationError,
    ValidationInfo,
)

BUILTIN_PREFIX = "builtin:"
PACKAGE_DIR = Path(str(resources.files("eval_pipeline")))


# YAML's `true` is no count and "3" no number. A number keeps the type it was written with: plan hashes
# (campaign.plan_version) have always seen `1` and `1.0` apart, so stored results stay theirs.
def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return value


def _non_negative(value: Any) -> int | float:
    if (number := _number(value)) < 0:
        raise ValueError(f"expected a number not below 0, got {value!r}")
    return number


def _positive(value: Any) -> int | float:
    if (number := _number(value)) <= 0:
        raise ValueError(f"expected a number above 0, got {value!r}")
    return number


Count = Annotated[int, Strict(), Ge(0)]
PositiveCount = Annotated[int, Strict(), Ge(1)]
Number = Annotated[int | float, PlainValidator(_non_negative)]
PositiveNumber = Annotated[int | float, PlainValidator(_positive)]


class FieldProblem(ValueError):
    """A problem a validator finds below the field it validates (a section's cross-field rule): `field` is the
    rest of the path, so the message names the field itself."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class ConfigModel(BaseModel):
    """A section of a configuration file: unknown fields and loose types are errors; immutable once read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def resolve_path(value: str, info: ValidationInfo, must_exist: bool) -> str:
    """`value` as an absolute path: `builtin:` under the package, relative ones under the file's directory.

    Without a base directory in the validation context (a mapping given in code, not a file) a relative
    path is kept as it is and its existence is left to the code that reads it.
    """
    base_dir: Path | None = (info.context or {}).get("base_dir")
    if value.startswith(BUILTIN_PREFIX):
        path = (PACKAGE_DIR / value.removeprefix(BUILTIN_PREFIX)).resolve()
        if not path.is_relative_to(PACKAGE_DIR.resolve()):
            raise ValueError(f"{value!r} leaves eval_pipeline's own files ({PACKAGE_DIR})")
    elif base_dir is None or Path(value).is_absolute():
        path = Path(value)
    else:
        path = (base_dir / value).resolve()
    if must_exist and (base_dir is not None or value.startswith(BUILTIN_PREFIX)) and not path.exists():
        raise ValueError(
            f"{path} does not exist (from {value!r}). A relative path is read from the campaign file's directory"
            f" ({base_dir}); give a path from there, an absolute path, or {BUILTIN_PREFIX}<path> for a file"
            f" shipped with eval_pipeline (e.g. {BUILTIN_PREFIX}demo_tasks)"
        )
    return str(path)


def _existing(value: str, info: ValidationInfo) -> str:
    return resolve_path(value, info, must_exist=True)


def _anywhere(value: str, info: ValidationInfo) -> str:
    return resolve_path(value, info, must_exist=False)


InputPath = Annotated[str, AfterValidator(_existing)]  # read at load or by a run: must exist
OutputPath = Annotated[str, AfterValidator(_anywhere)]  # written by a run (a mirror directory): may not exist yet


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple[Any, ...]:
    """The types a union annotation admits, nested unions flattened (itself when it is no union)."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(member for inner in typing.get_args(annotation) for member in _members(inner))
    return (annotation,)


def _fields(kind: Any) -> dict[str, Any]:
    """Field name -> annotation of a model or dataclass; empty for anything else."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {name: info.annotation for name, info in kind.model_fields.items()}
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind, include_extras=True)
        return {field.name: hints[field.name] for field in dataclasses.fields(kind)}
    return {}


def _tag(kind: Any) -> str | None:
    """A tagged union member's tag: its `kind` literal."""
    annotation = _fields(kind).get("kind")
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Literal else None


def _child(annotation: Any, part: str | int) -> tuple[Any, bool]:
    """The annotation one step down `part` of an error's location, and whether `part` is a union's tag
    (pydantic puts the chosen member's tag in the location; the file has no such level)."""
    members = _members(annotation)
    for member in members:
        if len(members) > 1 and _tag(member) == part:
            return member, True
    for member in members:
        if part in _fields(member):
            return _fields(member)[part], False
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin in (dict, Mapping) and args:
            return args[1], False
        if origin in (list, tuple) and args:
            return args[0], False
    return None, False


def _describe(error: Mapping[str, Any], root: Any) -> tuple[str, str]:
    """The field's path as written in the file ('' for the top level) and the problem, for one pydantic error;
    an unknown field's problem names the allowed ones."""
    annotation, path, parent = root, "", root
    for part in error["loc"]:
        if part == "[key]":  # pydantic's marker for a mapping's key that is wrong: the path ends at the key
            continue
        parent = annotation
        annotation, is_tag = _child(annotation, part)
        if not is_tag:
            path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, FieldProblem):
        path = f"{path}.{cause.field}" if path else cause.field
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        allowed = [name for member in _members(parent) for name in _fields(member)]
        close = difflib.get_close_matches(str(error["loc"][-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return path, f"unknown field{hint}; allowed: {', '.join(allowed)}"
    members = [member for member in _members(annotation) if member is not type(None)]
    kinds = [tag for tag in map(_tag, members) if tag] if len(members) > 1 else []
    if kinds and error["type"] == "union_tag_invalid":
        return path, f"unknown kind {error['ctx']['tag']!r} (known: {', '.join(kinds)})"
    if kinds:
        return path, f"expected a mapping with a kind ({', '.join(kinds)}), got {error.get('input')!r}"
    message = error["msg"].removeprefix("Value error, ")
    found = error.get("input")
    shown = "" if error["type"] in ("value_error", "missing") or isinstance(found, Mapping) else f", got {found!r}"
    return path, f"{message}{shown}"


def describe_errors(error: ValidationError, root: Any) -> list[tuple[str, str]]:
    """(field path, problem), one per problem of a validation of `root` (a model class or an annotated type)."""
    return list(dict.fromkeys(_describe(item, root) for item in error.errors(include_url=False)))


def problem_lines(origin: str, problems: list[tuple[str, str]]) -> str:
    """One line per problem, each naming the file (`origin`) and the field's path in it."""
    return "\n".join(f"{origin}: field {path}: {why}" if path else f"{origin}: {why}" for path, why in problems)
