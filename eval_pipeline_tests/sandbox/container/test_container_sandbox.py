"""The container backend against a real engine (Podman's Docker API in CI, Docker Engine elsewhere).

The base image comes from EVAL_PIPELINE_BASE_IMAGE (CI builds one from Debian
packages, since nothing can be pulled there).
"""

import json
import os
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import docker.errors
import duckdb
import pytest
import yaml
from dagster import DagsterInstance

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import BUILTIN_DIR, load_campaign
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.container import janitor
from eval_pipeline.sandbox.container.removal import removals_done
from eval_pipeline.sandbox.container.tool_volume import VOLUME_ID_LABEL, _fill_tools, tools_volume
from eval_pipeline.sandbox.container.workspace import CAMPAIGN_LABEL
from eval_pipeline.sandbox.pods import images
from eval_pipeline.sandbox.pods.engine import engine_client, engine_is_podman
from eval_pipeline.sandbox.pods.images import ENV_VENV, MANAGED_LABEL, FoundImage, ImageBuilder, find_image
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, ToolRuntime
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.demo import DemoBug, DemoRepo, DemoStage, build_repos_benchmark
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.engine import output_of
from eval_pipeline_tests.support.trials import prepare_on

# A bug whose test needs about 350 MB: OOM-killed under a 256 MB ceiling, fine under 3x.
MEMHOG = DemoRepo(
    name="bigbuffers",
    owner="eval-pipeline-test",
    stages=(
        DemoStage(
            message="Add buffers",
            version="0.1",
            files={
                "bigbuffers/__init__.py": "",
                "bigbuffers/fill.py": 'def filled(megabytes):\n    """megabytes of b"x"."""\n    return b"x" * (megabytes * 2**19)\n',
                "tests/test_fill.py": "from bigbuffers.fill import filled\n\n\ndef test_small():\n    assert filled(0) == b''\n",
            },
            bugs=(
                DemoBug(
                    number=1,
                    path="bigbuffers/fill.py",
                    buggy="(megabytes * 2**19)",
                    fixed="(megabytes * 2**20)",
                    test_path="tests/test_fill.py",
                    test_name="test_large_buffer_has_its_size",
                    test_code="\n\ndef test_large_buffer_has_its_size():\n    assert len(filled(350)) == 350 * 2**20\n",
                    problem_statement="filled(n) returns half of n megabytes.",
                ),
            ),
        ),
    ),
)


def test_image_layers_are_content_addressed_and_built_once(container_sandbox, demo_benchmark, engine, tmp_path):
    sandbox = container_sandbox()
    instance = demo_benchmark.instances[0]
    record = sandbox.build(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    again = sandbox.build(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    assert again["built"] == [] and again["image_id"] == record["image_id"]

    variant = replace(demo_benchmark.environment_for(instance), install=(f"echo {uuid.uuid4().hex} > .marker",))
    changed = sandbox.build(instance, variant, demo_benchmark.source)
    try:
        assert changed["built"] == [changed["tag"]], "only the instance layer above the change is rebuilt"
        assert changed["tag"] != record["tag"]
        log = ImageBuilder(engine, sandbox.root).log_path(changed["tag"])
        assert "COPY repo /testbed" in log.read_text() or log.stat().st_size > 0
        image = engine.images.get(changed["tag"])
        assert image.labels[MANAGED_LABEL] == "true"
        assert image.labels["eval_pipeline.instance"] == instance.instance_id
    finally:
        engine.images.remove(changed["tag"], force=True)


def test_a_pod_serves_trials_in_isolated_workspaces(container_sandbox, demo_benchmark, engine):
    sandbox = container_sandbox(pod_parallelism=2)
    instance = demo_benchmark.instances[1]
    environment = prepare_on(sandbox, demo_benchmark, instance)
    with sandbox.workspace(environment, "a") as first, sandbox.workspace(environment, "b") as second:
        assert first.container.id == second.container.id, "both trials run in the instance's one pod"
        assert first.uid != second.uid
        assert first.run("echo secret > secret.txt && echo changed > README.md", timeout_s=30).ok
        peek = second.run(f"cat {first.repo}/secret.txt", timeout_s=30)
        assert not peek.ok and "Permission denied" in peek.stderr
        assert second.run("cat README.md", timeout_s=30).stdout.startswith("# calclib")
        # Each trial sees its own workspace at the environment's path, and only its own.
        assert first.run("cat /testbed/secret.txt && touch /testbed/x", timeout_s=30).ok
        assert second.run("cat /testbed/README.md", timeout_s=30).stdout.startswith("# calclib")
        assert not second.run("test -e /testbed/secret.txt || test -e /testbed/x", timeout_s=30).ok
        # Nor can a trial undo its view to reach the shared environment: the mount is locked to its namespace.
        escape = "unshare -Urm sh -c 'umount -l /testbed; cat /testbed/secret.txt'; umount /testbed; touch /testbed/y"
        assert first.run(escape, timeout_s=30).stdout == "secret\n"
    pod = engine.containers.get(environment.location)
    assert pod.labels["eval_pipeline.instance"] == instance.instance_id
    assert pod.labels["eval_pipeline.campaign"] == sandbox.campaign
    assert pod.exec_run(["git", "-C", "/testbed", "status", "--porcelain"]).output == b""


@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_gold_resolves_and_empty_does_not_in_containers(container_sandbox, demo_benchmark, engine, mode):
    sandbox = container_sandbox(mode=mode)
    for instance in demo_benchmark.instances[2:4]:
        spec = demo_benchmark.environment_for(instance)
        environment = prepare_on(sandbox, demo_benchmark, instance)
        for patch, expected in ((instance.patch, Outcome.RESOLVED), ("", Outcome.UNRESOLVED)):
            with sandbox.workspace(environment, "grade") as workspace:
                if mode == "strict":
                    assert workspace.container.labels["eval_pipeline.trial"] == "grade"
                verdict = grade(instance, spec, patch, workspace, test_timeout_s=120)
            assert verdict.outcome is expected, (mode, instance.instance_id, verdict.detail, verdict.steps[-1:])
    removals_done()  # each is removed behind its trial, on a thread of this process
    trial_containers = engine.containers.list(
        all=True, filters={"label": [f"eval_pipeline.campaign={sandbox.campaign}", "eval_pipeline.role=trial"]}
    )
    assert trial_containers == [], "strict containers are removed with their workspace"


# The environment's own `python3`, first on PATH, replaced by one that leaves a mark and fails: were any harness
# process started as `python3`, root would leave the mark and the runner would answer nothing.
PLANTED_PYTHON = (
    f"rm {ENV_VENV}/bin/python3 && printf '#!/bin/sh\\ntouch /planted-python3-ran\\nexit 97\\n' > {ENV_VENV}/bin/python3"
    f" && chmod 755 {ENV_VENV}/bin/python3"
)


@pytest.mark.parametrize(("mode", "python"), [("pod", "3.6"), ("strict", "3.6"), ("pod", "3.7"), ("pod", "3.8")])
def test_the_harness_runs_on_its_own_interpreter_whatever_python3_the_environment_has(
    container_sandbox, demo_benchmark, mode, python
):
    """An environment on an older Python (3.6 lacks os.waitstatus_to_exitcode, which the runner calls) whose
    `python3` is not even Python: the pod's PID 1, the uid claim, the runner and its sweep are the runtime's
    interpreter, started by path; the trial's own commands still get the environment's python3."""
    sandbox = container_sandbox(mode=mode)
    spec = EnvironmentSpec(python=python, install=(PLANTED_PYTHON,))
    environment = sandbox.prepare(demo_benchmark.instances[0], spec, demo_benchmark.source)
    interpreter = f"{TOOLS_ROOT}/python/bin/python3"
    with sandbox.workspace(environment, "planted") as workspace:
        result = workspace.run(
            f"python{python} -c 'import os; print(hasattr(os, \"waitstatus_to_exitcode\"))'; python3; echo $?;"
            " tr '\\0' ' ' < /proc/$PPID/cmdline",
            timeout_s=60,
        )
        assert result.ok, result.summary()
        old, planted, runner = result.stdout.splitlines()
        assert (old, planted) == ("False", "97"), "the trial's commands get the environment's own python3"
        assert runner.split()[:7] == ToolRuntime().runner() and runner.split()[4:6] == [interpreter, "-I"]
        pid1 = workspace.container.exec_run(["cat", "/proc/1/cmdline"])
        assert pid1.output.decode().split("\0")[:-1] == ToolRuntime().runner("--reap")
        assert workspace.container.exec_run(["test", "-e", "/planted-python3-ran"]).exit_code == 1


def test_an_oom_kill_that_a_script_swallows_is_still_an_oom(container_sandbox, demo_benchmark):
    """A test script that turns a killed run into reward 0 and exits 0 must not become a scored failure."""
    sandbox = container_sandbox(limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=128, cpu_ceiling=1))
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[0])
    with sandbox.workspace(environment, "swallow") as workspace:
        hog = "python3 -c 'x = b\"y\" * (300 * 2**20)'"
        swallowed = workspace.run(f"if {hog}; then echo 1; else echo 0; fi", timeout_s=60)
        fine = workspace.run("python3 -c 'x = b\"y\" * (10 * 2**20)'", timeout_s=60)
    assert swallowed.exit_code == 0 and swallowed.stdout.strip() == "0"
    assert swallowed.oom_killed, swallowed.summary()
    assert fine.ok and not fine.oom_killed


def test_a_memory_hungry_task_is_oom_killed_at_1x_and_passes_at_3x(container_sandbox, tmp_path):
    benchmark = build_repos_benchmark("memhog", [MEMHOG], tmp_path / "mirrors")
    instance = benchmark.instances[0]
    base = ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=256, cpu_ceiling=1)
    store = LocalArtifactStore(tmp_path / "artifacts")
    evaluations = {}
    for multiplier in (1.0, 3.0):
        sandbox = container_sandbox(limits=base.with_multiplier(multiplier))
        environment = prepare_on(sandbox, benchmark, instance)
        generation = generate(instance, make_agent("oracle"), 0, environment, sandbox, store)
        evaluations[multiplier] = evaluate(
            instance, benchmark.environment_for(instance), generation, environment, sandbox, store, 120
        )
    starved, roomy = evaluations[1.0], evaluations[3.0]
    assert starved.outcome_type is Outcome.OOM_KILLED and not starved.outcome_type.is_scored
    assert roomy.outcome_type is Outcome.RESOLVED
    assert starved.resources["requested"]["effective_memory_ceiling_mb"] == 256
    assert roomy.resources["requested"]["effective_memory_ceiling_mb"] == 768
    assert starved.resources["requested"]["memory_floor_mb"] == roomy.resources["requested"]["memory_floor_mb"] == 128


def test_the_janitor_removes_leaked_containers(engine, container_sandbox, demo_benchmark):
    sandbox = container_sandbox()
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[0])
    assert engine.containers.get(environment.location).status == "running"
    assert janitor.remove_containers(engine, sandbox.campaign) == [environment.location]
    assert not engine.containers.list(all=True, filters={"label": f"eval_pipeline.campaign={sandbox.campaign}"})
    usage = janitor.disk_usage(engine)
    assert usage["images"] >= 3 and usage["image_bytes_total"] > 0
    with sandbox.workspace(environment, "after-janitor") as workspace:  # a lost pod is started again on demand
        assert workspace.run("true", timeout_s=30).ok


def count_containers_created(engine, campaign: str, action) -> dict[str, int]:
    """Run `action` while counting, by role, the distinct containers the campaign creates meanwhile.

    Podman's events are lossy both ways: a live stream can drop events over a long quiet spell (image builds),
    and its event log can rotate during a long suite. So both are read, the stream while `action` runs and the
    log for its time span afterwards, and their containers are merged (distinct ids: an event may repeat).
    """
    filters = {"type": "container", "event": "create", "label": f"eval_pipeline.campaign={campaign}"}
    started = int(time.time())
    seen: list[dict] = []
    stream = engine.events(decode=True, filters=filters)
    listener = threading.Thread(target=lambda: seen.extend(stream), daemon=True)
    listener.start()
    try:
        action()
    finally:
        time.sleep(1)  # let the last events arrive
        stream.close()
    seen.extend(engine.events(since=started, until=int(time.time()) + 1, decode=True, filters=filters))
    roles = {
        event["Actor"]["ID"]: event["Actor"]["Attributes"].get("eval_pipeline.role")
        for event in seen
        if event.get("time", 0) >= started
    }
    return {role: list(roles.values()).count(role) for role in set(roles.values())}


def demo_twin(tmp_path, backend: str) -> str:
    """The built-in demo_containers campaign on `backend`, cut to the reference agent and one seed to keep CI
    short (the null agent's verdicts are covered per backend by the gold/empty tests)."""
    campaign = yaml.safe_load((BUILTIN_DIR / "demo_containers.yaml").read_text())
    campaign["sandbox"]["backend"] = backend
    campaign["slices"]["terminal"]["path"] = str(DEMO_TASKS_DIR)
    campaign["variants"] = [v for v in campaign["variants"] if v["name"] == "oracle"]
    campaign["seeds"] = 1
    path = tmp_path / f"demo_containers_{backend}.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return str(path)


@pytest.mark.slow
def test_demo_campaign_in_containers_matches_local_with_one_pod_per_code_instance(engine, tmp_path):
    homes = {name: tmp_path / name for name in ("local", "containers")}
    envs = {name: {**os.environ, "DAGSTER_HOME": str(home)} for name, home in homes.items()}
    local = subprocess.Popen(
        ["eval-pipeline", "run", "--campaign", demo_twin(tmp_path, "local"), "--json"],
        env=envs["local"],
        stdout=subprocess.PIPE,
        text=True,
    )
    summaries = {}

    def run_in_containers() -> None:
        completed = subprocess.run(
            ["eval-pipeline", "run", "--campaign", demo_twin(tmp_path, "container"), "--json"],
            env=envs["containers"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        summaries["containers"] = json.loads(completed.stdout)

    created = count_containers_created(engine, "demo_containers", run_in_containers)
    summaries["local"] = json.loads(local.communicate(timeout=1200)[0])
    # Code instances: one long-lived pod each, no container per trial. Terminal tasks run as Harbor runs them:
    # a container of their own per trial, where the agent works and the verifier then runs in place (the
    # evaluation scores that run's stored result, so it starts no container of its own).
    assert created["pod"] == 8, created
    assert created["trial"] == 8, created
    assert (summaries["containers"]["scored"], summaries["containers"]["planned"]) == (14, 16)
    code_issues = [summary["slices"]["code-issues"] for summary in summaries.values()]
    assert code_issues[0] == code_issues[1]

    def verdicts(name: str, campaign: str) -> list[tuple]:
        path = homes[name] / "eval_pipeline" / "results" / f"{campaign}.duckdb"
        with duckdb.connect(str(path), read_only=True) as db:
            return db.execute(
                "SELECT instance_id, trial, outcome, environment_image FROM trials ORDER BY 1, 2"
            ).fetchall()

    local_rows, container_rows = verdicts("local", "demo_containers"), verdicts("containers", "demo_containers")

    def deterministic(rows: list[tuple]) -> list[tuple]:  # shuffle-deck's test is flaky by design
        return [row[:3] for row in rows if row[0] != "shuffle-deck"]

    assert deterministic(local_rows) == deterministic(container_rows)
    assert ("build-index", "oracle-s0", "oom_killed") in deterministic(container_rows), "the cgroup's OOM kill"
    assert all(row[3].startswith("sha256:") for row in container_rows), "each trial records its image digest"

    with DagsterInstance.from_config(str(homes["containers"])) as dagster_instance:
        campaign = load_campaign("demo_containers")
        defs = build_definitions([campaign], Paths(homes["containers"] / "eval_pipeline"))
        job = defs.resolve_job_def(stage_job_name(campaign, "environments"))
        rerun = job.execute_in_process(instance=dagster_instance, partition_key=local_rows[0][0])
        image = rerun.asset_materializations_for_node("demo_containers__environment_image")[0]
        assert image.metadata["built"].value == [], "a second run of the image assets builds nothing"
        defs.resources["eval_pipeline"].harness.sandbox(campaign).release()


def test_releasing_a_campaign_removes_all_its_containers_and_no_other_campaigns(container_sandbox, engine):
    """A campaign's pods are removed (several at a time) when it ends; another campaign's are left running."""
    sandbox = container_sandbox()
    image = os.environ.get("EVAL_PIPELINE_BASE_IMAGE", "localhost/eval-base:bookworm")
    ours = {MANAGED_LABEL: "true", CAMPAIGN_LABEL: sandbox.campaign}
    theirs = {MANAGED_LABEL: "true", CAMPAIGN_LABEL: f"{sandbox.campaign}-other"}
    for _ in range(4):
        engine.containers.run(image, ["sleep", "600"], detach=True, labels=ours, init=True)
    other = engine.containers.run(image, ["sleep", "600"], detach=True, labels=theirs, init=True)
    try:
        assert len(engine.containers.list(filters={"label": [f"{CAMPAIGN_LABEL}={sandbox.campaign}"]})) == 4
        sandbox.release()
        remaining = engine.containers.list(all=True, filters={"label": [f"{CAMPAIGN_LABEL}={sandbox.campaign}"]})
        assert remaining == []
        other.reload()
        assert other.status == "running"
    finally:
        other.remove(force=True)  # the campaign's own are the fixture's to remove, should release have failed


def test_a_tool_volume_put_the_engine_failed_is_made_once_more_and_a_refused_one_is_not():
    """Podman's copier subprocess has broken its pipe under load (a 500, CI 2026-11-28): the runtime and its
    marker are put again; an error of the request itself (4xx) is not retried, nor a second 500."""

    class Filler:
        def __init__(self, failures: list[int]) -> None:
            self.failures, self.puts = failures, []

        def put_archive(self, path: str, data: bytes) -> bool:
            if self.failures:
                status = self.failures.pop(0)
                raise docker.errors.APIError("put", SimpleNamespace(status_code=status, reason="", url=""))
            self.puts.append(path)
            return True

    filler = Filler([500])
    _fill_tools(filler)
    assert filler.puts == [TOOLS_ROOT, TOOLS_ROOT]  # the runtime, then its marker
    for failures in ([404], [500, 500]):
        with pytest.raises(docker.errors.APIError):
            _fill_tools(Filler(failures))


def test_the_tool_volume_is_looked_into_once_per_engine_and_again_when_made_anew(
    container_sandbox, engine, monkeypatch, tmp_path
):
    """The first process fills the tool volume (or finds it full) through a container and marks it on the
    engine; later processes, of any data directory, trust the mark, but only for that very volume: one removed
    and made again under the same name, empty, is filled again before any trial mounts it."""
    from docker.models.containers import ContainerCollection

    from eval_pipeline.sandbox.container import tool_volume as volume_module

    monkeypatch.setattr(volume_module, "TOOLS_VOLUME_PREFIX", f"eval-pipeline-tools-test-{uuid.uuid4().hex[:8]}-")
    monkeypatch.setattr(volume_module, "_FILLED_VOLUMES", set())
    created = []  # the fillers the sandbox makes (`output_of`, below, passes its arguments by name)
    create = ContainerCollection.create
    monkeypatch.setattr(
        ContainerCollection, "create", lambda self, *a, **k: a and created.append(a) or create(self, *a, **k)
    )
    image = os.environ.get("EVAL_PIPELINE_BASE_IMAGE", "localhost/eval-base:bookworm")
    sandbox = container_sandbox()

    def runtime_files(volume: str) -> list[str]:
        return output_of(engine, image, ["ls", TOOLS_ROOT], volumes={volume: {"bind": TOOLS_ROOT}}).decode().split()

    name = tools_volume(sandbox.client, image, sandbox.root / "locks")
    try:
        assert len(created) == 1
        volume_module._FILLED_VOLUMES.clear()  # as in the command's next process
        assert tools_volume(sandbox.client, image, sandbox.root / "locks") == name and len(created) == 1
        volume_module._FILLED_VOLUMES.clear()  # a process of another data directory
        settings = SandboxSettings.from_mapping({"backend": "container"})
        elsewhere = make_sandbox(settings, tmp_path / "elsewhere", ResourceLimits(), f"test-{uuid.uuid4().hex[:8]}")
        assert tools_volume(elsewhere.client, image, elsewhere.root / "locks") == name and len(created) == 1
        filled = runtime_files(name)
        assert filled

        for labels in ({MANAGED_LABEL: "true"}, {MANAGED_LABEL: "true", VOLUME_ID_LABEL: uuid.uuid4().hex}):
            engine.volumes.get(name).remove()
            engine.volumes.create(name, labels=labels)  # the same name, empty: without an id, then another id
            volume_module._FILLED_VOLUMES.clear()
            created.clear()
            tools_volume(sandbox.client, image, sandbox.root / "locks")
            assert len(created) == 1
            assert runtime_files(name) == filled
    finally:
        for volume in engine.volumes.list():
            if volume.name.startswith(name):  # the volume and its marks
                volume.remove(force=True)


def _engine_answering(ping_headers: dict[str, str], paths: list[str]) -> ThreadingHTTPServer:
    """An HTTP server playing a Docker Engine: its ping answers with `ping_headers`, /version with API 1.40;
    every path asked is noted in `paths`."""

    class Engine(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            paths.append(self.path)
            body = json.dumps({"ApiVersion": "1.40"}).encode() if self.path.endswith("/version") else b"OK"
            self.send_response(200)
            for name, value in {**(ping_headers if "_ping" in self.path else {}), "Content-Type": "text/plain"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize(
    ("ping", "version", "podman", "asked_version"),
    [
        ({"Api-Version": "1.43", "Libpod-Api-Version": "4.3.1"}, "1.43", True, False),
        ({"Api-Version": "1.51", "Server": "Docker/29.0.0 (linux)"}, "1.51", False, False),  # past docker-py's 1.44
        ({}, "1.40", False, True),  # an engine whose ping names no version: docker-py's negotiation
    ],
)
def test_the_engine_client_learns_the_api_version_and_the_engine_from_the_ping(
    monkeypatch, ping, version, podman, asked_version
):
    """Podman answers /version by running its runtime's binaries (a second under load, in every process of a
    campaign), so the client asks only the ping, whose headers state the API version and name Libpod."""
    paths: list[str] = []
    server = _engine_answering(ping, paths)
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
    try:
        client = engine_client()
        assert (client.api.api_version, engine_is_podman()) == (version, podman)
        assert any(path.endswith("/version") for path in paths) == asked_version, paths
    finally:
        server.shutdown()


class _EngineImages:
    """The engine's image lookups as docker-py answers them, counted: what `find_image` asks of the engine."""

    def __init__(self, present: dict[str, str]) -> None:
        self.present, self.asked = present, []

    def get(self, name: str) -> SimpleNamespace:
        self.asked.append(name)
        if name not in self.present:
            raise docker.errors.ImageNotFound(name)
        return SimpleNamespace(id=self.present[name], attrs={"Config": {"WorkingDir": "/app"}})


def test_an_image_found_on_the_engine_is_not_asked_about_again_within_seconds(monkeypatch):
    """An environment step asks about the same three images eleven times within a second: an image found is
    taken as found for IMAGE_LOOKUP_TTL_S, one not found (about to be built) is asked about every time."""
    lookups = _EngineImages({"task:1": "sha256:aa"})
    client = SimpleNamespace(api=SimpleNamespace(base_url=f"http+docker://{uuid.uuid4().hex}"), images=lookups)
    found = [find_image(client, "task:1") for _ in range(3)]
    assert found == [FoundImage("sha256:aa", {"WorkingDir": "/app"})] * 3 and lookups.asked == ["task:1"]
    assert find_image(client, "harness:1") is None and find_image(client, "harness:1") is None
    assert lookups.asked == ["task:1", "harness:1", "harness:1"]
    monkeypatch.setattr(images, "IMAGE_LOOKUP_TTL_S", 0.0)
    lookups.present["task:1"] = "sha256:bb"  # rebuilt since
    assert find_image(client, "task:1").id == "sha256:bb" and lookups.asked[-1] == "task:1"
