"""What a slice's dataset source says: one model per `kind`, checked when the campaign file is loaded.

The sources form a union tagged by `kind`, so a misspelt field of any kind
fails at load naming it, long before a run reads the dataset
(datasets/sources.py loads what these describe).
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from eval_pipeline.common.fields import ConfigModel, Count, InputPath, OutputPath, PositiveCount, describe_errors
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.named_image import ImagePolicy
from eval_pipeline.tasks.swebench.canaries import MAX_TWINS, TWINS_PER_TEST, TwinSettings


def _environment_spec(value: Any) -> EnvironmentSpec:
    """An `environments:` entry, checked by EnvironmentSpec's own reader (its message names the field)."""
    if isinstance(value, EnvironmentSpec):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of an environment's fields, got {value!r}")
    return EnvironmentSpec.from_mapping(value)


OnInvalid = Literal["reject", "quarantine"]


class Twins(ConfigModel):
    """`twins:` how many mutated twins guard a code task's graded tests at each grading
    (tasks/swebench/canaries.py): `per_test` (k) for each graded test that can have them, FAIL_TO_PASS tests
    first, at most `per_run` in a graded run. A forger who cannot tell a test from its twins passes a grading's
    twinned failing tests with chance 1/(k + 1) each; each twin costs a run of its test."""

    per_test: PositiveCount = TWINS_PER_TEST
    per_run: Count = MAX_TWINS

    def settings(self) -> TwinSettings:
        return TwinSettings(self.per_test, self.per_run)


class DemoSource(ConfigModel):
    """`kind: demo`: the built-in demo benchmark."""

    kind: Literal["demo"]
    twins: Twins = Twins()


class TerminalSource(ConfigModel):
    """`kind: terminal`: Terminal-Bench / Harbor task directories; `mirror_dir` defaults to the data directory's.
    `images`: build each task's image from its Dockerfile (`build`, the default), or pull the `docker_image` its
    task.toml names (`pull`; `auto` where it names one), as Harbor's `force_build` decides."""

    kind: Literal["terminal"]
    path: InputPath
    mirror_dir: OutputPath | None = None
    on_invalid: OnInvalid = "reject"
    images: ImagePolicy = "build"


class RowsSource(ConfigModel):
    """Where a row dataset is read from: a file or a saved folder (`path`), or the Hub's `hf_name` pinned at
    `revision`, and the `split`; exactly one of `path` and `hf_name`. The row kinds' sources extend it, each with
    its `kind`."""

    kind: str
    path: InputPath | None = None
    hf_name: str | None = None
    revision: str | None = Field(default=None, validate_default=True)
    split: str = "test"

    @field_validator("revision")
    @classmethod
    def _pinned(cls, revision: str | None, info: ValidationInfo) -> str | None:
        """A Hub dataset is read at an exact revision, so that a run pins what it read."""
        if info.data.get("hf_name") and not revision:
            raise ValueError("required with hf_name, so that a run pins what it read")
        return revision

    @model_validator(mode="after")
    def _one_origin(self) -> Self:
        if bool(self.hf_name) == bool(self.path):
            raise ValueError("give path (a file or a saved folder) or hf_name with revision: exactly one of them")
        return self


class SweBenchSource(RowsSource):
    """`kind: swebench`: rows in SWE-bench's schema from a file or folder (`path`), or pinned from the Hub.
    `images`: build each environment from its spec (`build`, the default), or pull SWE-bench's instance image of
    the row (`pull`, `auto`), named as SWE-bench's harness names it under `image_namespace` and `image_tag`
    (its `--namespace` and `--instance_image_tag`)."""

    kind: Literal["swebench"]
    mirror_dir: OutputPath | None = None
    url_template: str = RepoSource.url_template
    environments: dict[str, Annotated[EnvironmentSpec, PlainValidator(_environment_spec)]] = {}
    include_hints: bool = False
    on_invalid: OnInvalid = "reject"
    twins: Twins = Twins()
    images: ImagePolicy = "build"
    image_namespace: str = Field(default="swebench", pattern=r"^[a-z0-9][a-z0-9._/:-]*$")
    image_tag: str = Field(default="latest", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class SweBenchProSource(RowsSource):
    """`kind: swebench_pro`: SWE-bench Pro rows (`path`, or `hf_name` pinned at `revision`: ScaleAI/SWE-bench_Pro),
    each with its run script, parser and Dockerfiles from `scripts`, a checkout of scaleapi/SWE-bench_Pro-os
    (`run_scripts/<instance_id>/`, `dockerfiles/`). Every row runs in the image it names (`images: pull`, or
    `auto`, the same here: no Pro image is built from a spec)."""

    kind: Literal["swebench_pro"]
    scripts: InputPath
    on_invalid: OnInvalid = "reject"
    images: Literal["pull", "auto"] = "pull"


DatasetSource = Annotated[DemoSource | TerminalSource | SweBenchSource | SweBenchProSource, Field(discriminator="kind")]
SOURCE_ADAPTER: TypeAdapter[DemoSource | TerminalSource | SweBenchSource | SweBenchProSource] = TypeAdapter(
    DatasetSource
)


def parse_source(
    source: Mapping[str, Any] | DemoSource | TerminalSource | SweBenchSource | SweBenchProSource,
) -> DemoSource | TerminalSource | SweBenchSource | SweBenchProSource:
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
