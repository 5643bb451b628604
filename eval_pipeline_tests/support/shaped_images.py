"""Environment images built here, re-shaped as a dataset ships its own (SWE-bench's instance images, SWE-smith's
repository images): the environment's Python moved from the harness's ENV_VENV to where the dataset's images
hold it, then the dataset's own layout of the repository, as Dockerfile lines."""

from __future__ import annotations

from pathlib import Path

from eval_pipeline.sandbox.pods.images import ENV_VENV

__all__ = ["reshaped_image"]


def reshaped_image(engine, context: Path, built_tag: str, python_prefix: str, steps: list[str], tag: str) -> str:
    """`tag`, built in `context` from the pipeline's environment image `built_tag` with its Python at
    `python_prefix` (ENV_VENV removed) and then the Dockerfile lines `steps`."""
    move_python = (
        f"RUN prefix=$(readlink -f {ENV_VENV}) && rm {ENV_VENV} && mkdir -p $(dirname {python_prefix})"
        f' && ln -s "$prefix" {python_prefix}'
    )
    (context / "Dockerfile").write_text("\n".join([f"FROM {built_tag}", move_python, *steps]) + "\n")
    engine.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    return tag
