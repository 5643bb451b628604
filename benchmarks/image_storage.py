"""Image storage per SWE-bench instance, from the images the container backend built on this engine.

    DOCKER_HOST=unix:///run/podman/podman.sock PYTHONPATH=$PWD python benchmarks/image_storage.py

The container backend builds SWE-bench environments in layers (sandbox/pods/images.py): a system and a
base image shared by everything, an `env` image per repository and version (the repository at its setup
commit, its dependencies installed), and an `instance` image per instance (the repository at the instance's
commit). What a campaign of N instances stores is the shared images once, each env image once per repository
version, and each instance's own layers. This reads the images the engine holds (after the test suite, the
rows of the tests) and prints, as JSON:

- `per_instance_mb`: each instance image's own layers (those above its env image), by instance;
- `per_env_mb`: each env image's own layers (above its base), by repository version, with its instances;
- `shared_mb`: the base image's whole size (system layer included), stored once;
- `summary`: median and max per instance, and what N instances of these repository versions would store.

Epoch AI's optimized SWE-bench Verified images come to about 60 MB per instance on average, all layers counted
(their 2025 write-up: 500 instances in about 30 GB); the comparable figure here is `(shared + envs +
instances) / instances` for a dataset's whole set of repository versions.
"""

import json
import statistics
from collections import defaultdict
from typing import Any

import docker

MB = 1024 * 1024


def layers(image: Any) -> list[tuple[str, int]]:
    """The image's layers, oldest first, each as (the instruction that made it, its size)."""
    return [(layer.get("CreatedBy", ""), layer.get("Size", 0)) for layer in reversed(image.history())]


def own_mb(image: Any, parents: list[Any]) -> float:
    """The size of `image`'s layers above the longest of `parents` it is built on (whose layers start its own)."""
    mine = layers(image)
    below = max((len(p) for p in map(layers, parents) if mine[: len(p)] == p and len(p) < len(mine)), default=0)
    return sum(size for _, size in mine[below:]) / MB


def images(client: docker.DockerClient, layer: str) -> list[Any]:
    return client.images.list(filters={"label": f"eval_pipeline.layer={layer}"})


def main() -> None:
    client = docker.from_env()
    envs = {image.labels["eval_pipeline.env"]: image for image in images(client, "env")}
    bases = images(client, "base") + images(client, "system")
    per_instance, instances_of = {}, defaultdict(list)
    for image in images(client, "instance"):
        env_name = image.labels.get("eval_pipeline.env")
        if env_name in envs:
            instance_id = image.labels["eval_pipeline.instance"]
            per_instance[instance_id] = round(own_mb(image, [envs[env_name]]), 1)
            instances_of[env_name].append(instance_id)
    per_env = {
        name: {"own_mb": round(own_mb(image, bases), 1), "instances": sorted(instances_of[name])}
        for name, image in envs.items()
        if instances_of[name]
    }
    # The shared part: the largest base any env is built on, all its layers (system layer included).
    base = max(bases, key=lambda image: len(layers(image)))
    shared = base.attrs["Size"] / MB
    sizes = sorted(per_instance.values())
    total = shared + sum(env["own_mb"] for env in per_env.values()) + sum(sizes)
    print(
        json.dumps(
            {
                "per_instance_mb": dict(sorted(per_instance.items())),
                "per_env_mb": per_env,
                "shared_mb": round(shared, 1),
                "summary": {
                    "instances": len(sizes),
                    "repository_versions": len(per_env),
                    "instance_median_mb": round(statistics.median(sizes), 1) if sizes else None,
                    "instance_max_mb": max(sizes, default=None),
                    "total_mb": round(total, 1),
                    "total_per_instance_mb": round(total / len(sizes), 1) if sizes else None,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
