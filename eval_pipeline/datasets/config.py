"""What a slice's dataset source says: one model per `kind`, checked when the campaign file is loaded.

The sources form a union tagged by `kind`, so a misspelt field of any kind
fails at load naming it, long before a run reads the dataset
(datasets/sources.py loads what these describe).
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from eval_pipeline.common.fields import ConfigModel, InputPath, OutputPath, describe_errors
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource


def _environment_spec(value: Any) -> EnvironmentSpec:
    """An `environments:` entry, checked by EnvironmentSpec's own reader (its message names the field)."""
    if isinstance(value, EnvironmentSpec):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of an environment's fields, got {value!r}")
    return EnvironmentSpec.from_mapping(value)


OnInvalid = Literal["reject", "quarantine"]


class DemoSource(ConfigModel):
    """`kind: demo`: the built-in demo benchmark."""

    kind: Literal["demo"]


class TerminalSource(ConfigModel):
    """`kind: terminal`: Terminal-Bench / Harbor task directories; `mirror_dir` defaults to the data directory's."""

    kind: Literal["terminal"]
    path: InputPath
    mirror_dir: OutputPath | None = None
    on_invalid: OnInvalid = "reject"


class SweBenchSource(ConfigModel):
    """`kind: swebench`: rows in SWE-bench's schema from a file or folder (`path`), or pinned from the Hub."""

    kind: Literal["swebench"]
    path: InputPath | None = None
    hf_name: str | None = None
    revision: str | None = Field(default=None, validate_default=True)
    split: str = "test"
    mirror_dir: OutputPath | None = None
    url_template: str = RepoSource.url_template
    environments: dict[str, Annotated[EnvironmentSpec, PlainValidator(_environment_spec)]] = {}
    include_hints: bool = False
    on_invalid: OnInvalid = "reject"

    @field_validator("revision")
    @classmethod
    def _pinned(cls, revision: str | None, info: ValidationInfo) -> str | None:
        """A Hub dataset is read at an exact revision, so that a run pins what it read."""
        if info.data.get("hf_name") and not revision:
            raise ValueError("required with hf_name, so that a run pins what it read")
        return revision

    @model_validator(mode="after")
    def _one_origin(self) -> "SweBenchSource":
        if bool(self.hf_name) == bool(self.path):
            raise ValueError("give path (a file or a saved folder) or hf_name with revision: exactly one of them")
        return self


DatasetSource = Annotated[DemoSource | TerminalSource | SweBenchSource, Field(discriminator="kind")]
SOURCE_ADAPTER: TypeAdapter[DemoSource | TerminalSource | SweBenchSource] = TypeAdapter(DatasetSource)


def parse_source(source: Mapping[str, Any] | DemoSource | TerminalSource | SweBenchSource) -> Any:
    """A source given in code (a mapping) as its model; ValueError names `benchmark.<field>` and the problem."""
    if not isinstance(source, Mapping):
        return source
    try:
        return SOURCE_ADAPTER.validate_python(source)
    except ValidationError as error:
        problems = describe_errors(error, DatasetSource)
        raise ValueError(
            "; ".join(f"{'.'.join(('benchmark', path)).rstrip('.')}: {why}" for path, why in problems)
        ) from None
