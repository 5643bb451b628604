"""The tool runtime's size and the command runner's start in a container (tool_runtime.py).

    DOCKER_HOST=... python benchmarks/tool_runtime_start.py [--image localhost/eval-base:bookworm] [--runs 21]

A Kubernetes trial starts the runner once per command (an exec per request), so its start is paid per command.
In a container of `--image` with the runtime mounted as the container backend mounts it, the runtime's own
interpreter starts the runner `--runs` times on a request running `true`, as a pod's exec does (the request on
its stdin), and times each start to the runner's answer (`in_container_*`: no engine in the figure); then the same
request goes `--runs` times through an exec per request (`exec_*`: the engine's exec included, as a trial pays
it). Prints JSON with the medians, the runtime's archive size and file count, and the machine's load.

Against another runtime (one an older checkout laid out with its `extract_runtime`), started as that checkout
starts its runner: `--compare DIR ARGV_JSON` mounts DIR read-only at /compared and alternates the two runners'
starts in the same container (`in_container_compared_median_ms`), so the machine's load weighs on both alike:

    --compare /tmp/old-tools '["/usr/bin/env", "LD_LIBRARY_PATH=/compared/python/lib",
                              "/compared/python/bin/python3", "-I", "/compared/runner"]'
"""

import argparse
import io
import json
import os
import statistics
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import docker

from eval_pipeline.sandbox.container.engine_exec import EngineExec
from eval_pipeline.sandbox.container.tool_volume import tools_volume
from eval_pipeline.sandbox.pods.exec_transport import HARNESS, ExecPerRequest
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, runtime_archive

REQUEST = RunRequest(command="true", cwd="/", env={"PATH": "/usr/bin:/bin"}, timeout_s=30, output_bytes=1000)
# Run by the runtime's interpreter in the container: each runner start, from its exec to its answer, in seconds.
_TIMER = """
import json, subprocess, sys, time
runners, request, runs = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
times = [[] for _ in runners]
for _ in range(runs):
    for runner, taken in zip(runners, times):
        started = time.perf_counter()
        subprocess.run(runner, input=request + "\\n", capture_output=True, text=True, check=True)
        taken.append(time.perf_counter() - started)
print(json.dumps(times))
"""


def runtime_size() -> dict[str, int]:
    archive = runtime_archive()
    members = tarfile.open(fileobj=io.BytesIO(archive)).getmembers()
    return {"runtime_archive_bytes": len(archive), "runtime_files": len(members)}


def measure(image: str, runs: int, compared: tuple[str, list[str]] | None) -> dict[str, object]:
    client = docker.from_env()
    volume = tools_volume(client, image, Path(tempfile.gettempdir()) / "eval-bench-locks")
    container = client.containers.run(
        image,
        HARNESS.runner("--reap"),
        name=f"bench-runtime-{uuid.uuid4().hex[:8]}",
        detach=True,
        network_mode="none",
        volumes={
            volume: {"bind": TOOLS_ROOT, "mode": "ro,nocopy"},
            **({compared[0]: {"bind": "/compared", "mode": "ro"}} if compared else {}),
        },
    )
    try:
        pod = EngineExec(container)
        runners = [HARNESS.runner(), *([compared[1]] if compared else [])]
        timer = HARNESS.python("-c", _TIMER, json.dumps(runners), REQUEST.to_json(), str(runs))
        exit_code, stdout, stderr = pod.run(timer)
        assert exit_code == 0, stderr
        inside, *other = json.loads(stdout)
        transport = ExecPerRequest(pod)
        through_exec = []
        for _ in range(runs):
            started = time.perf_counter()
            transport.ask(REQUEST, 60)
            through_exec.append(time.perf_counter() - started)
    finally:
        container.remove(force=True)
    return {
        "image": image,
        "runs": runs,
        "in_container_median_ms": round(statistics.median(inside) * 1000, 1),
        **({"in_container_compared_median_ms": round(statistics.median(other[0]) * 1000, 1)} if other else {}),
        "exec_median_ms": round(statistics.median(through_exec) * 1000, 1),
        "load_average": os.getloadavg(),
        **runtime_size(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="localhost/eval-base:bookworm")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--compare", nargs=2, metavar=("DIR", "ARGV_JSON"))
    arguments = parser.parse_args()
    compared = (arguments.compare[0], json.loads(arguments.compare[1])) if arguments.compare else None
    print(json.dumps(measure(arguments.image, arguments.runs, compared)))


if __name__ == "__main__":
    main()
