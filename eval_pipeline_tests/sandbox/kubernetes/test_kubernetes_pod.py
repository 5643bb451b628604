"""A rendered environment pod, run for real with `podman kube play`, serves a trial, then is torn down.

No Kubernetes API server runs here; Podman runs the Kubernetes Pod manifest
the backend renders, enforcing its resources. Everything else is the
Kubernetes backend's own: image build, manifest, workspaces, resources
record; only the exec transport reaches the pod through the engine's API
instead of the Kubernetes API (that path is tested in test_kubernetes_backend).
"""

import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import kubernetes_validate
import yaml

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.tool_session import open_tool_session
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.container.engine_exec import EngineExec
from eval_pipeline.sandbox.kubernetes.manifest import CONTAINER, TOOLS_VOLUME
from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox
from eval_pipeline.sandbox.kubernetes.slots import claimed_slot
from eval_pipeline.sandbox.pods.exec_transport import PodExec
from eval_pipeline.sandbox.tool_runtime import ToolRuntime, extract_runtime, runtime_identity
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate


def with_tools_from_directory(manifest: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The manifest with its tool server image volume played from the directory that image was built from
    (the same files): Podman 4's kube play mounts no image volumes."""
    volumes = [
        {"name": volume["name"], "hostPath": {"path": str(directory), "type": "Directory"}}
        if volume["name"] == TOOLS_VOLUME
        else volume
        for volume in manifest["spec"]["volumes"]
    ]
    return {**manifest, "spec": {**manifest["spec"], "volumes": volumes}}


class KubePlaySandbox(KubernetesSandbox):
    """The Kubernetes backend with Podman standing in for the cluster: pods are played, not created."""

    def ensure_pod(self, manifest: dict[str, Any]) -> None:
        kubernetes_validate.validate(manifest, "1.31", strict=True)
        tools = self.root / "tool-runtime" / runtime_identity()
        extract_runtime(tools)  # built into the image once per engine, so perhaps not under this root yet
        manifest = with_tools_from_directory(manifest, tools)
        name = f"{manifest['metadata']['name']}-{CONTAINER}"
        running = [c for c in self.images.client.containers.list(filters={"name": name}) if c.name == name]
        if running:
            return
        path = self.root / "pods" / f"{manifest['metadata']['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(manifest))
        subprocess.run(["podman", "kube", "play", str(path)], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while self.images.client.containers.get(name).exec_run(["test", "-d", "/testbed"]).exit_code != 0:
            assert time.monotonic() < deadline, f"{name} never became ready"
            time.sleep(0.5)

    def pod_exec(self, environment: EnvironmentHandle) -> PodExec:
        return EngineExec(self.images.client.containers.get(f"{environment.location}-{CONTAINER}"))

    def release(self) -> None:
        for path in (self.root / "pods").glob("*.yaml"):
            subprocess.run(["podman", "kube", "down", str(path)], check=True, capture_output=True)


def test_a_rendered_environment_pod_runs_a_trial_under_podman_kube_play(engine, demo_benchmark, tmp_path):
    limits = ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=512, cpu_floor=0.5, cpu_ceiling=1)
    settings = SandboxSettings.from_mapping({"backend": "kubernetes"})
    sandbox = KubePlaySandbox(tmp_path / "kubernetes", limits, settings, f"test-{uuid.uuid4().hex[:8]}")
    store = LocalArtifactStore(tmp_path / "artifacts")
    instance = demo_benchmark.instances[2]
    spec = demo_benchmark.environment_for(instance)
    try:
        environment = sandbox.prepare(instance, spec, demo_benchmark.source)
        pod = engine.containers.get(f"{environment.location}-{CONTAINER}")
        manifest = sandbox.pod_manifest(
            instance.instance_id, environment.details["image"], environment.details["tools_image"]
        )
        assert pod.labels.items() >= manifest["metadata"]["labels"].items()
        assert pod.attrs["HostConfig"]["Memory"] == 512 * 2**20, "Podman enforces the manifest's limit: the ceiling"
        for _ in range(3):  # Podman 4.3 under load now and then loses an exec's output (CI at f059d61)
            if "NoNewPrivs" in (output := pod.exec_run(["cat", "/proc/1/status"]).output.decode()):
                break
        status = dict(line.split(":\t", 1) for line in output.splitlines() if ":\t" in line)
        assert status.get("NoNewPrivs") == "1", f"the security context forbids regaining privileges: {output!r}"
        pid1 = pod.exec_run(["cat", "/proc/1/cmdline"]).output.decode().split("\0")[:-1]
        assert pid1 == ToolRuntime().runner("--reap"), "the runner runs on the runtime's interpreter and loader"
        assert not int(status["CapBnd"], 16) & (1 << 13), "CAP_NET_RAW (13) is dropped"

        outcomes = {}
        for agent in ("oracle", "null"):
            generation = generate(instance, make_agent(agent), 0, environment, sandbox, store)
            evaluation = evaluate(instance, spec, generation, environment, sandbox, store, 120)
            outcomes[agent] = evaluation.outcome_type
        assert outcomes == {"oracle": Outcome.RESOLVED, "null": Outcome.UNRESOLVED}

        async def use_tools() -> None:  # the tool server runs from the pod's own tool volume
            with sandbox.workspace(environment, "tools") as workspace:
                async with open_tool_session(workspace) as session:
                    me = await session.call("run_command", {"command": "id -u && ls"})
                    assert me.structured["stdout"].split()[0] == str(workspace.uid)
                    assert "README.md" in me.structured["stdout"]

        anyio.run(use_tools)
        assert evaluation.resources["backend"] == "kubernetes"
        assert evaluation.resources["requested"]["effective_memory_ceiling_mb"] == 512
        leftover = pod.exec_run(["sh", "-c", "ls /workspaces"]).output.decode().split()
        assert leftover == [], "every trial's workspace is removed from the long-lived pod"
    finally:
        sandbox.release()
    assert not engine.containers.list(all=True, filters={"name": environment.location})


def test_run_pods_sharing_an_environment_pod_claim_distinct_slots_in_it(engine, demo_benchmark, tmp_path):
    """Run pods share no file system, only the environment pod: slots are claimed there, and a crashed
    run's stale claim is broken rather than blocking the pod forever."""
    limits = ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=512, cpu_floor=0.5, cpu_ceiling=1)
    settings = SandboxSettings.from_mapping({"backend": "kubernetes", "pod_parallelism": 2})
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    runs = [KubePlaySandbox(tmp_path / f"run-pod-{n}", limits, settings, campaign) for n in range(3)]
    instance = demo_benchmark.instances[2]
    environment = runs[0].prepare(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    pod = engine.containers.get(f"{environment.location}-{CONTAINER}")
    try:
        waited: list[str] = []

        def third_trial() -> None:
            with runs[2].workspace(environment, "c") as workspace:
                waited.append(workspace.root)

        with runs[0].workspace(environment, "a") as a, runs[1].workspace(environment, "b") as b:
            assert {a.root, b.root} == {"/workspaces/slot0", "/workspaces/slot1"} and a.uid != b.uid
            blocked = threading.Thread(target=third_trial)
            blocked.start()
            time.sleep(3)
            assert waited == [], "both slots are held: the third trial waits"
        blocked.join(60)
        assert len(waited) == 1 and waited[0] in {a.root, b.root}, "it got the first slot freed (b's or a's)"

        # A run crashed an hour ago holding slot0; slot1 is held now.
        assert (
            pod.exec_run(
                ["sh", "-c", "mkdir -p /workspaces/.claims/slot0 && touch -d '1 hour ago' /workspaces/.claims/slot0"]
            ).exit_code
            == 0
        )
        with runs[1].workspace(environment, "b") as b, runs[0].workspace(environment, "a") as a:
            assert (b.root, a.root) == ("/workspaces/slot0", "/workspaces/slot1")
        assert pod.exec_run(["ls", "/workspaces/.claims"]).output.decode().split() == []

        # A claim held longer than the stale limit stays fresh: its holder refreshes it.
        with claimed_slot(EngineExec(pod), 2, heartbeat_s=0.5) as slot:
            time.sleep(6)  # unrefreshed, the claim would be 6 s old; refreshes are an exec apart, slower under load
            age = pod.exec_run(["sh", "-c", f"echo $(( $(date +%s) - $(stat -c %Y /workspaces/.claims/slot{slot}) ))"])
            assert int(age.output) <= 3
    finally:
        runs[0].release()
