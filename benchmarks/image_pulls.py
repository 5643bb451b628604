"""What pulling instance images from a registry costs a node: bytes per instance, time per pull, the working set.

    DOCKER_HOST=unix:///run/podman/podman.sock PYTHONPATH=$PWD \
        python benchmarks/image_pulls.py [--registry 127.0.0.1:15000] [--instances N]

The images are the SWE-bench instance images the container backend built on this engine (label
`eval_pipeline.layer=instance`, one per instance, the test suite's real rows first), pushed to the local registry
(scripts/start_image_registry.sh) as `eval-pipeline-bench/sweb.eval.x86_64.<instance>:latest` and pulled back
through the engine's mirror as `docker.io/eval-pipeline-bench/...`, as a node behind a pull-through cache pulls
SWE-bench's images. Pulls go into stores of their own (`podman --root`), never the engine's, so that a cold pull
finds nothing and the engine's images are untouched. Prints, as JSON:

- `per_instance`: each image's compressed bytes in the registry (what a cold pull transfers), its size unpacked,
  and the time of a cold pull into an empty store;
- `node`: the images pulled one after another into one store, as a node's trials meet them: each pull's time and
  the bytes it fetched (the layers no earlier image had), the store's size on disk after all (the working set),
  and a warm pull's time (the image present: one manifest request);
- `warm_engine_pull_s`: the harness's own pull (sandbox/pods/registry.py) through the engine's API, the image
  present;
- `load`: the machine's load average before and after.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import docker
import docker.errors

from eval_pipeline.sandbox.pods.registry import pull_image

NAMESPACE = "eval-pipeline-bench"
MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json"
MB = 1024 * 1024


def listed(client: docker.DockerClient, label: str, attempts: int = 10) -> list[Any]:
    """The engine's images carrying `label`; Podman fails a listing while another process removes an image, so a
    failed listing is tried again."""
    for _ in range(attempts - 1):
        try:
            return client.images.list(filters={"label": [label]})
        except docker.errors.APIError:
            time.sleep(2)
    return client.images.list(filters={"label": [label]})


def instance_images(client: docker.DockerClient, count: int) -> dict[str, Any]:
    """The newest instance image of each instance on the engine, `count` of them, real rows before the demo's."""
    newest: dict[str, Any] = {}
    for image in listed(client, "eval_pipeline.layer=instance"):
        instance = image.labels.get("eval_pipeline.instance", "")
        if instance and (instance not in newest or image.attrs["Created"] > newest[instance].attrs["Created"]):
            newest[instance] = image
    ordered = sorted(newest, key=lambda instance: (instance.startswith("eval-pipeline-"), instance))
    return {instance: newest[instance] for instance in ordered[:count]}


def repository(instance: str) -> str:
    """The instance's image name as SWE-bench's harness forms it, under this benchmark's namespace."""
    return f"{NAMESPACE}/sweb.eval.x86_64.{instance.replace('__', '_1776_')}".lower()


def push(image_id: str, registry: str, name: str) -> None:
    """Push the engine's image to the registry (plain HTTP) as `name:latest`."""
    subprocess.run(
        ["podman", "push", "--quiet", "--tls-verify=false", image_id, f"{registry}/{name}:latest"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def layer_sizes(registry: str, name: str) -> dict[str, int]:
    """The compressed size of each layer of `name:latest` in the registry, by digest."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/latest", headers={"Accept": MANIFEST_TYPES}
    )
    manifest = json.load(urllib.request.urlopen(request, timeout=30))
    return {layer["digest"]: int(layer["size"]) for layer in manifest["layers"]}


def pull_into(store: Path, reference: str) -> float:
    """Pull `reference` with Podman into the store at `store`; the seconds it took."""
    command = ["podman", "--root", str(store / "root"), "--runroot", str(store / "run"), "pull", "--quiet", reference]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def disk_bytes(store: Path) -> int:
    """What the store's images take on disk (its layers' files, each counted once)."""
    output = subprocess.run(["du", "-sb", str(store / "root")], check=True, capture_output=True, text=True).stdout
    return int(output.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default=os.environ.get("EVAL_PIPELINE_TEST_REGISTRY", "127.0.0.1:15000"))
    parser.add_argument("--instances", type=int, default=4)
    args = parser.parse_args()
    load_before = os.getloadavg()
    client = docker.from_env(timeout=600)
    images = instance_images(client, args.instances)
    for instance, image in images.items():
        push(image.id, args.registry, repository(instance))
    layers = {instance: layer_sizes(args.registry, repository(instance)) for instance in images}
    references = {instance: f"docker.io/{repository(instance)}:latest" for instance in images}

    per_instance = {}
    for instance, reference in references.items():
        with tempfile.TemporaryDirectory(prefix="pulls-", dir="/var/tmp") as scratch:
            cold_s = pull_into(Path(scratch), reference)
            per_instance[instance] = {
                "compressed_mb": round(sum(layers[instance].values()) / MB, 1),
                "unpacked_mb": round(disk_bytes(Path(scratch)) / MB, 1),
                "cold_pull_s": round(cold_s, 1),
            }

    node_pulls, seen = [], set()
    with tempfile.TemporaryDirectory(prefix="pulls-node-", dir="/var/tmp") as scratch:
        store = Path(scratch)
        for instance, reference in references.items():
            seconds = pull_into(store, reference)
            fetched = sum(size for digest, size in layers[instance].items() if digest not in seen)
            seen |= set(layers[instance])
            node_pulls.append({"instance": instance, "pull_s": round(seconds, 1), "fetched_mb": round(fetched / MB, 1)})
        working_set = disk_bytes(store)
        warm_s = [pull_into(store, reference) for reference in references.values()]

    engine_warm_s = []
    for reference in references.values():
        started = time.perf_counter()
        pull_image(client, reference)
        engine_warm_s.append(time.perf_counter() - started)

    unpacked = sum(figures["unpacked_mb"] for figures in per_instance.values())
    print(
        json.dumps(
            {
                "registry": args.registry,
                "per_instance": per_instance,
                "node": {
                    "pulls_in_order": node_pulls,
                    "working_set_mb": round(working_set / MB, 1),
                    "sum_of_images_unpacked_mb": round(unpacked, 1),
                    "warm_pull_s": [round(seconds, 2) for seconds in warm_s],
                },
                "warm_engine_pull_s": [round(seconds, 2) for seconds in engine_warm_s],
                "load": {"before": load_before, "after": os.getloadavg()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
