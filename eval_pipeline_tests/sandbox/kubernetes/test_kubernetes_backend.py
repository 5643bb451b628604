"""The Kubernetes backend's API calls, made by the official client against a small fake cluster.

No API server can run here. The client itself builds and serializes every
request (its real request objects); only the HTTP transport is replaced, by
a fake cluster that keeps pods in a dict and answers as the API would. Exec
goes over a real websocket to a server speaking Kubernetes' channel protocol.
"""

import json
import os
import select
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
import urllib3
import yaml
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.stream import ws_client
from mcp import Client
from websockets.sync.server import serve

from eval_pipeline.agents.tool_session import channel_transport
from eval_pipeline.common.outcomes import SandboxLost
from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxError, SandboxSettings
from eval_pipeline.sandbox.kubernetes.pod_exec import KubernetesExec
from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox, remove_pods
from eval_pipeline.sandbox.kubernetes.slots import claimed_slot
from eval_pipeline.sandbox.local import TOOL_SERVER
from eval_pipeline.sandbox.pods.exec_transport import PodExec
from eval_pipeline.sandbox.pods.workspace import ExecWorkspace
from eval_pipeline.sandbox.runner.entry import DIRECTORY as RUNNER
from eval_pipeline_tests.support.cli import eval_pipeline_cli

NAMESPACE = "eval-environments"


def pod_object(manifest: dict, phase: str = "Running", ready: bool = True, waiting: str | None = None) -> dict:
    """The pod as the API returns it: the manifest plus a status."""
    state = {"waiting": {"reason": waiting, "message": "back-off"}} if waiting else {"running": {}}
    return {
        **manifest,
        "metadata": {"creationTimestamp": datetime.now(UTC).isoformat(), **manifest["metadata"]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"name": "environment", "image": "i", "imageID": "", "ready": ready, "restartCount": 0, "state": state}
            ],
        },
    }


class FakeCluster:
    """The pods API of one namespace, as an urllib3 pool manager: records each request the client sends."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict, dict | None]] = []
        self.on_create = lambda manifest: pod_object(manifest)  # what a created pod looks like when read
        self.hidden_once: set[str] = set()  # pods another process creates between our read and our create

    def _reply(self, status: int, payload: dict) -> urllib3.HTTPResponse:
        return urllib3.HTTPResponse(body=json.dumps(payload).encode(), status=status, preload_content=True)

    def _missing(self, name: str) -> urllib3.HTTPResponse:
        return self._reply(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "message": name})

    def request(self, method, url, fields=None, body=None, **_):
        parts = urlsplit(url)
        query = dict(fields or {}) | {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.requests.append((method, parts.path, query, json.loads(body) if body else None))
        prefix = f"/api/v1/namespaces/{NAMESPACE}/pods"
        assert parts.path.startswith(prefix), parts.path
        name = parts.path.removeprefix(prefix).strip("/")
        if method == "GET" and not name:
            wanted = dict(pair.split("=") for pair in query["labelSelector"].split(","))
            items = [p for p in self.pods.values() if wanted.items() <= p["metadata"]["labels"].items()]
            return self._reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        if method == "GET":
            if name in self.hidden_once:
                self.hidden_once.discard(name)
                return self._missing(name)
            return self._reply(200, self.pods[name]) if name in self.pods else self._missing(name)
        if method == "POST":
            manifest = json.loads(body)
            if manifest["metadata"]["name"] in self.pods:
                return self._reply(409, {"kind": "Status", "status": "Failure", "reason": "AlreadyExists"})
            self.pods[manifest["metadata"]["name"]] = self.on_create(manifest)
            return self._reply(201, manifest)
        if method == "DELETE":
            if self.pods.pop(name, None) is None:
                return self._missing(name)
            return self._reply(200, {"kind": "Status", "status": "Success"})
        raise AssertionError(f"unexpected {method} {url}")

    def calls(self) -> list[tuple[str, str]]:
        return [(method, path.rsplit("/", 1)[-1]) for method, path, _, _ in self.requests]


def api(cluster: FakeCluster | None = None, host: str = "http://kubernetes.invalid") -> CoreV1Api:
    client = ApiClient(Configuration(host=host))
    if cluster is not None:
        client.rest_client.pool_manager = cluster
    return CoreV1Api(client)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def sandbox(cluster, tmp_path) -> KubernetesSandbox:
    backend = KubernetesSandbox(
        tmp_path, ResourceLimits(), SandboxSettings.from_mapping({"namespace": NAMESPACE}), "c1"
    )
    backend.core = api(cluster)
    backend.poll_interval_s = 0.01
    return backend


def manifest_for(sandbox: KubernetesSandbox, instance_id: str = "owner__repo-1") -> dict:
    return sandbox.pod_manifest(
        instance_id, "registry.example.com/eval-pipeline-instance:abc", "registry.example.com/eval-pipeline-tools:abc"
    )


def test_a_pod_is_created_once_from_its_manifest_and_reused(sandbox, cluster):
    manifest = manifest_for(sandbox)
    sandbox.ensure_pod(manifest)
    sandbox.ensure_pod(manifest)
    name = manifest["metadata"]["name"]
    assert cluster.calls() == [("GET", name), ("POST", "pods"), ("GET", name), ("GET", name)]
    (created,) = [body for method, _, _, body in cluster.requests if method == "POST"]
    assert created == manifest, "the client sends the rendered manifest unchanged"


def test_a_pod_another_process_created_first_is_used(sandbox, cluster):
    manifest = manifest_for(sandbox)
    name = manifest["metadata"]["name"]
    cluster.pods[name] = pod_object(manifest)
    cluster.hidden_once.add(name)  # it appears between our read and our create: the create gets 409
    sandbox.ensure_pod(manifest)
    assert cluster.calls() == [("GET", name), ("POST", "pods"), ("GET", name)]


def test_a_finished_pod_is_replaced(sandbox, cluster):
    manifest = manifest_for(sandbox)
    name = manifest["metadata"]["name"]
    cluster.pods[name] = pod_object(manifest, phase="Failed", ready=False)
    sandbox.ensure_pod(manifest)
    assert cluster.calls() == [("GET", name), ("DELETE", name), ("GET", name), ("POST", "pods"), ("GET", name)]
    assert cluster.pods[name]["status"]["phase"] == "Running"


def test_a_pod_that_cannot_pull_its_image_is_an_infrastructure_error_naming_the_reason(sandbox, cluster):
    cluster.on_create = lambda manifest: pod_object(manifest, phase="Pending", ready=False, waiting="ImagePullBackOff")
    with pytest.raises(SandboxError, match="ImagePullBackOff"):
        sandbox.ensure_pod(manifest_for(sandbox))


def test_a_pod_never_ready_times_out_as_an_infrastructure_error(sandbox, cluster):
    cluster.on_create = lambda manifest: pod_object(manifest, phase="Pending", ready=False)
    sandbox.ready_timeout_s = 0.1
    with pytest.raises(SandboxError, match="not ready after"):
        sandbox.ensure_pod(manifest_for(sandbox))


def test_an_api_error_is_an_infrastructure_error(sandbox, cluster):
    cluster.request = lambda *args, **kwargs: urllib3.HTTPResponse(body=b"{}", status=500, preload_content=True)
    with pytest.raises(SandboxError, match="500"):
        sandbox.ensure_pod(manifest_for(sandbox))


def test_a_failed_exec_is_blamed_on_a_lost_pod_only_when_the_pod_is_gone(sandbox, cluster):
    manifest = manifest_for(sandbox)
    pod = KubernetesExec(sandbox.core, NAMESPACE, manifest["metadata"]["name"])
    assert isinstance(pod.failure("x"), SandboxLost)
    cluster.pods[manifest["metadata"]["name"]] = pod_object(manifest)
    failure = pod.failure("x")
    assert isinstance(failure, SandboxError) and not isinstance(failure, SandboxLost)
    cluster.pods[manifest["metadata"]["name"]] = pod_object(manifest, phase="Failed")
    assert isinstance(pod.failure("x"), SandboxLost)


def test_the_janitor_removes_only_eval_pipelines_pods_of_the_campaign(sandbox, cluster):
    mine, finished, young = (manifest_for(sandbox, f"i-{n}") for n in range(3))
    other = KubernetesSandbox(Path("/x"), ResourceLimits(), sandbox.settings, "c2").pod_manifest("i-0", "img", "tools")
    foreign = {**mine, "metadata": {**mine["metadata"], "name": "not-ours", "labels": {"app": "db"}}}
    old = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    for manifest, phase, created in ((mine, "Running", old), (finished, "Failed", None), (young, "Running", None)):
        cluster.pods[manifest["metadata"]["name"]] = pod_object(manifest, phase=phase)
        if created:
            cluster.pods[manifest["metadata"]["name"]]["metadata"]["creationTimestamp"] = created
    for manifest in (other, foreign):
        cluster.pods[manifest["metadata"]["name"]] = pod_object(manifest)

    removed = remove_pods(sandbox.core, NAMESPACE, campaign="c1", older_than=timedelta(days=1))
    assert sorted(removed) == sorted([mine["metadata"]["name"], finished["metadata"]["name"]])
    (listing,) = [query for method, path, query, _ in cluster.requests if method == "GET" and path.endswith("/pods")]
    assert listing["labelSelector"] == "app.kubernetes.io/managed-by=eval-pipeline,eval-pipeline/campaign=c1"
    sandbox.release()  # the campaign's remaining pod, whatever its age
    assert set(cluster.pods) == {other["metadata"]["name"], "not-ours"}


@pytest.fixture
def exec_server():
    """A websocket server speaking Kubernetes' exec protocol (v4.channel.k8s.io): it answers every exec with
    the stdout, stderr and exit code the test sets, or with the command's own when the test sets `execute`
    (run here, given the line the client sent on stdin), and records the query the client connected with."""
    seen: list[dict] = []
    answer = {"stdout": b"", "stderr": b"", "status": {"status": "Success"}}

    def handler(connection):
        query = parse_qs(urlsplit(connection.request.path).query)
        seen.append(query)
        if query["stdin"] == ["True"]:
            query["input"] = connection.recv()[1:]  # after its channel byte (0: stdin)
        if answer.get("execute"):
            done = subprocess.run(query["command"], input=query.get("input", ""), capture_output=True, text=True)
            answer.update(stdout=done.stdout.encode(), stderr=done.stderr.encode())
        time.sleep(answer.get("hang_s", 0))
        for channel, data in ((1, answer["stdout"]), (2, answer["stderr"])):
            if data:
                connection.send(bytes([channel]) + data)
        if answer["status"] is not None:
            connection.send(b"\x03" + json.dumps(answer["status"]).encode())

    with serve(handler, "127.0.0.1", 0, subprotocols=["v4.channel.k8s.io"], close_timeout=0.2) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}", answer, seen
        server.shutdown()


def test_exec_runs_the_command_in_the_environment_container_and_returns_its_exit_and_output(exec_server):
    host, answer, seen = exec_server
    pod = KubernetesExec(api(host=host), NAMESPACE, "env-pod")
    answer.update(stdout=b'{"ok": true}', stderr=b"warning\n")
    answer["status"] = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert pod.run(["python3", "-c", "print(1)", "a b"]) == (3, b'{"ok": true}', b"warning\n")
    assert seen[0]["command"] == ["python3", "-c", "print(1)", "a b"]
    assert seen[0]["container"] == ["environment"] and seen[0]["stdout"] == ["True"] and seen[0]["stdin"] == ["False"]
    answer.update(stdout=b"done", stderr=b"", status={"status": "Success"})
    assert pod.run(["true"]) == (0, b"done", b"")


def test_a_request_reaches_the_command_runner_on_stdin_and_never_in_its_command_line(exec_server):
    """A Kubernetes exec has no environment of its own: the request, secrets and all, goes on stdin, where the
    real command runner reads it."""
    host, answer, seen = exec_server
    answer["execute"] = True
    secret = "sk-not-in-any-command-line"
    request = {"command": 'echo "$KEY"', "cwd": "/", "env": {"KEY": secret}, "timeout_s": 10, "output_bytes": 100}
    argv = [sys.executable, RUNNER]
    exit_code, stdout, _ = KubernetesExec(api(host=host), NAMESPACE, "env-pod").run(argv, private=json.dumps(request))
    assert exit_code == 0 and json.loads(stdout)["stdout"] == f"{secret}\n"
    assert seen[0]["stdin"] == ["True"] and secret not in json.dumps(seen[0]["command"])


def test_an_exec_cut_off_without_a_status_is_an_infrastructure_error(exec_server, cluster):
    host, answer, _ = exec_server
    core = api(host=host)
    core.api_client.rest_client.pool_manager = cluster  # the pod is gone: reads of it answer 404
    answer["status"] = None
    with pytest.raises(SandboxLost, match="without an exit status"):
        KubernetesExec(core, NAMESPACE, "env-pod").run(["sleep", "1000"])


def test_the_janitor_command_deletes_leaked_pods_through_the_kubeconfig(cluster, sandbox, tmp_path):
    """`eval-pipeline janitor --kubernetes`, against the fake cluster served over HTTP at the kubeconfig's server."""

    class Handler(BaseHTTPRequestHandler):
        def do_request(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            reply = cluster.request(self.command, self.path, body=body)
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(reply.data)

        do_GET = do_DELETE = do_POST = do_request

        def log_message(self, *args):
            pass

    leaked = manifest_for(sandbox, "i-leaked")
    cluster.pods[leaked["metadata"]["name"]] = pod_object(leaked, phase="Failed")
    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    try:
        result = eval_pipeline_cli(
            {**os.environ, "KUBECONFIG": str(kubeconfig)},
            *("janitor", "--kubernetes", "--namespace", NAMESPACE, "--older-than-hours", "24"),
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"namespace": NAMESPACE, "removed_pods": [leaked["metadata"]["name"]]}
    assert cluster.pods == {}


def test_a_workspace_refuses_a_pod_prepared_for_other_resources(sandbox, cluster, tmp_path):
    manifest = manifest_for(sandbox)
    environment = EnvironmentHandle(
        "kubernetes",
        "owner__repo-1",
        "key",
        manifest["metadata"]["name"],
        {
            "image": "registry.example.com/eval-pipeline-instance:abc",
            "tools_image": "registry.example.com/eval-pipeline-tools:abc",
        },
    )
    roomier = KubernetesSandbox(tmp_path, ResourceLimits(multiplier=3), sandbox.settings, "c1")
    roomier.core = sandbox.core
    with pytest.raises(SandboxError, match="prepared for other resources"), roomier.workspace(environment, "t"):
        pass
    assert cluster.requests == [], "nothing was created for the mismatched pod"


def test_an_exec_whose_connection_hangs_is_an_infrastructure_error_not_a_hung_trial(exec_server, cluster):
    host, answer, _ = exec_server
    core = api(host=host)
    core.api_client.rest_client.pool_manager = cluster  # reads of the pod answer 404: it is gone
    answer["hang_s"] = 3
    started = time.monotonic()
    with pytest.raises(SandboxLost, match="no answer within 1 s"):
        KubernetesExec(core, NAMESPACE, "env-pod").run(["sleep", "1000"], timeout_s=1)
    assert time.monotonic() - started < 3


@pytest.fixture
def streaming_exec_server():
    """A websocket server speaking Kubernetes' exec protocol as a pod's kubelet streams it: it starts the
    tool server here in place of the command (whose paths are the pod's), and streams its stdin (channel 0),
    stdout (channel 1) and stderr (channel 2) until either side ends; records each exec's command."""
    commands: list[list[str]] = []

    def handler(connection):
        commands.append(parse_qs(urlsplit(connection.request.path).query)["command"])
        server = subprocess.Popen(
            [sys.executable, str(TOOL_SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

        def pump(stream, channel: bytes) -> None:
            while data := os.read(stream.fileno(), 65536):
                connection.send(channel + data)

        pumps = [
            threading.Thread(target=pump, args=(stream, channel), daemon=True)
            for stream, channel in ((server.stdout, b"\x01"), (server.stderr, b"\x02"))
        ]
        for thread in pumps:
            thread.start()

        def end_with_the_server() -> None:  # as a kubelet ends the exec when its process exits
            for thread in pumps:
                thread.join()
            connection.close()

        threading.Thread(target=end_with_the_server, daemon=True).start()
        try:
            for message in connection:
                server.stdin.write(message[1:] if isinstance(message, bytes) else message[1:].encode())
                server.stdin.flush()
        finally:
            server.stdin.close()
            server.wait(timeout=10)

    with serve(handler, "127.0.0.1", 0, subprotocols=["v4.channel.k8s.io"], close_timeout=0.2) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}", commands
        server.shutdown()


def test_a_tool_session_streams_over_the_exec_subresource(streaming_exec_server, tmp_path):
    """The MCP session reaches the pod's tool server over one exec stream, its session on the first line of
    stdin and its runtime's environment set by `env` (an exec takes none)."""
    host, commands = streaming_exec_server
    (tmp_path / "notes.txt").write_text("from the pod\n")
    session = {"placement": {"cwd": str(tmp_path), "env": {"PATH": os.defpath}, "output_bytes": 10_000}}
    pod = KubernetesExec(api(host=host), NAMESPACE, "env-pod")

    async def main() -> None:
        channel = pod.open_channel(["/opt/eval/tools/python/bin/python3"], {"PYTHONHOME": "/x"}, json.dumps(session))
        async with Client(channel_transport(channel)) as client:
            result = await client.call_tool("read_file", {"path": "notes.txt"})
            assert result.structured_content["content"] == "from the pod\n"

    anyio.run(main)
    assert commands == [["/usr/bin/env", "PYTHONHOME=/x", "/opt/eval/tools/python/bin/python3"]]


def test_a_tool_server_that_fails_to_start_says_why_through_the_stream(streaming_exec_server):
    """Its stderr travels on the exec's stderr channel, for the message of the session it broke."""
    host, _ = streaming_exec_server
    channel = KubernetesExec(api(host=host), NAMESPACE, "env-pod").open_channel(["python3"], {}, '{"no": "placement"}')
    while channel.receive():
        pass
    assert "KeyError: 'placement'" in channel.diagnostics()
    channel.close()


def test_closing_a_tool_channel_under_its_read_ends_the_read_quietly(streaming_exec_server, monkeypatch, tmp_path):
    """The client closes the stream from its own thread while the reader waits in its poll (every session's
    end): the read reports the end of the stream, it does not raise out of the session (seen once in CI,
    where the close landed between the reader's poll and its unregister; held there on purpose here)."""
    host, _ = streaming_exec_server
    closed = threading.Event()

    class PollReturningAfterClose:
        def __init__(self) -> None:
            self.poll_ = select.poll()
            self.register, self.unregister = self.poll_.register, self.poll_.unregister

        def poll(self, timeout: float | None) -> list:
            closed.wait(timeout=5)
            return self.poll_.poll(0)

    monkeypatch.setattr(ws_client, "select", SimpleNamespace(poll=PollReturningAfterClose, POLLIN=select.POLLIN))
    session = {"placement": {"cwd": str(tmp_path), "env": {"PATH": os.defpath}, "output_bytes": 10_000}}
    channel = KubernetesExec(api(host=host), NAMESPACE, "env-pod").open_channel(["python3"], {}, json.dumps(session))
    received: list[bytes | BaseException] = []

    def read() -> None:
        try:
            received.append(channel.receive())
        except BaseException as error:  # noqa: BLE001 - the assertion below reports it
            received.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    channel.close()
    closed.set()
    reader.join(timeout=5)
    assert received == [b""]


class LostOutputPod(PodExec):
    """A pod whose engine answers an exec with success and no output, as Podman did once under load."""

    name = "env-pod"

    def run(self, argv, timeout_s=0.0, private=None):
        return 0, b"", b""

    def failure(self, message):
        return SandboxError(message)

    def open_channel(self, argv, env, first_line):
        raise AssertionError("no channel is opened here")


def test_a_claim_whose_answer_the_engine_lost_is_an_infrastructure_failure():
    """A uid's or a slot's: not a ValueError out of the trial's step (which left its partition unmaterialized
    without a typed outcome), a SandboxError, retried like any engine failure."""
    workspace = ExecWorkspace(LostOutputPod(), "/workspaces/slot0", {}, ResourceLimits(output_bytes=1000))
    with pytest.raises(SandboxError, match="not a uid"):
        workspace.create()
    with pytest.raises(SandboxError, match="not a slot"), claimed_slot(LostOutputPod(), 2):
        pass


def test_trials_running_at_once_on_one_backend_each_have_their_own_api_client(tmp_path, monkeypatch):
    """The harness shares one backend among a batch's trials, which run on threads; an exec stream swaps its
    client's request method while it runs, so a client shared between them would send another thread's pod
    request over a websocket. A client given to the backend (as tests give their fake cluster's) serves all."""
    monkeypatch.setattr("kubernetes.config.load_config", lambda: None)
    backend = KubernetesSandbox(
        tmp_path, ResourceLimits(), SandboxSettings.from_mapping({"namespace": NAMESPACE}), "c1"
    )
    clients = []
    threads = [threading.Thread(target=lambda: clients.append(backend.core)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clients[0].api_client is not clients[1].api_client
    assert backend.core is backend.core, "a thread keeps its own"
    given = CoreV1Api(ApiClient(Configuration()))
    backend.core = given
    threads = [threading.Thread(target=lambda: clients.append(backend.core)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clients[2] is clients[3] is given
