"""k8s/ and every pod the Kubernetes backend renders, checked against the Kubernetes schemas.

No API server runs here, so what can be checked for real is checked: each
manifest with kubernetes-validate (strict: unknown fields fail), the Helm
values' Kubernetes parts as the pods they become, and a trial step's
`dagster-k8s/config` tag through dagster-k8s's own job builder.
"""

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from dagster_k8s.job import DagsterK8sJobConfig, construct_dagster_k8s_job, get_user_defined_k8s_config
from kubernetes.client import ApiClient

from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.defs import STAGE_TAG, build_definitions, stage_job_name
from eval_pipeline.orchestration.instance_config import PROCESS_ENVIRONMENT
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.kubernetes.manifest import MANAGED_BY, NETWORK_LABEL, NETWORK_OPTED_IN, label_value
from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox

K8S_DIR = Path(__file__).parents[3] / "k8s"
KUBERNETES_VERSION = "1.31"


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def manifests() -> list[dict]:
    return [
        document
        for path in sorted(K8S_DIR.glob("*.yaml"))
        if path.name != "values.yaml"
        for document in yaml.safe_load_all(path.read_text())
    ]


def by_kind(kind: str) -> list[dict]:
    return [m for m in manifests() if m["kind"] == kind]


def values() -> dict:
    return yaml.safe_load((K8S_DIR / "values.yaml").read_text())


def test_every_manifest_in_k8s_passes_the_kubernetes_schemas():
    found = manifests()
    for manifest in found:
        validate(manifest)
    kinds = {m["kind"] for m in found}
    assert kinds >= {"Namespace", "ResourceQuota", "LimitRange", "ServiceAccount", "Role", "RoleBinding"}
    assert kinds >= {"NetworkPolicy", "Secret"}


def test_a_manifest_with_an_unknown_field_is_rejected():
    """The check above can fail: strict validation refuses what a cluster would refuse."""
    quota = by_kind("ResourceQuota")[0]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate({**quota, "spec": {**quota["spec"], "hardd": {"pods": "1"}}})


def rendered_pod(
    limits: ResourceLimits, instance_id: str = "owner__repo-1234", network: bool = False, **settings
) -> dict:
    sandbox = KubernetesSandbox(
        Path("/unused"), limits, SandboxSettings.from_mapping(settings), "nightly-2026", network
    )
    return sandbox.pod_manifest(
        instance_id, "registry.example.com/eval-pipeline-instance:abc", "registry.example.com/eval-pipeline-tools:abc"
    )


@pytest.mark.parametrize(
    ("limits", "settings", "requests", "ceilings"),
    [
        (ResourceLimits(), {}, {"memory": "512Mi", "cpu": "1000m"}, {"memory": "2048Mi", "cpu": "2000m"}),
        (ResourceLimits(multiplier=3), {}, {"memory": "512Mi", "cpu": "1000m"}, {"memory": "6144Mi", "cpu": "6000m"}),
        (ResourceLimits(multiplier=None), {}, {"memory": "512Mi", "cpu": "1000m"}, None),
        (
            ResourceLimits(memory_floor_mb=256, memory_ceiling_mb=1024, cpu_floor=0.5, cpu_ceiling=1),
            {"pod_parallelism": 3},
            {"memory": "768Mi", "cpu": "1500m"},
            {"memory": "3072Mi", "cpu": "3000m"},
        ),
    ],
)
def test_rendered_environment_pods_pass_the_schemas_with_floor_as_request_and_ceiling_as_limit(
    limits, settings, requests, ceilings
):
    pod = rendered_pod(limits, **settings)
    validate(pod)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == requests
    assert resources.get("limits") == ceilings
    assert pod["metadata"]["namespace"] == by_kind("Namespace")[0]["metadata"]["name"]
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_odd_instance_ids_still_make_valid_names_and_labels():
    instance_id = "Some.Org/a-very-long-repository-name_with_UNDERSCORES__issue-123456789012345678901234567890"
    pod = rendered_pod(ResourceLimits(), instance_id)
    validate(pod)
    name = pod["metadata"]["name"]
    assert len(name) <= 63 and name == name.lower()
    assert pod["metadata"]["annotations"]["eval-pipeline/instance-id"] == instance_id
    assert len(pod["metadata"]["labels"]["eval-pipeline/instance"]) <= 63
    assert label_value(instance_id) != label_value(instance_id.replace("9", "8")), "shortened values stay distinct"
    other = rendered_pod(ResourceLimits(multiplier=3), instance_id)
    assert other["metadata"]["name"] != name, "another allocation never reuses a pod"


def test_the_network_policy_denies_environment_pods_all_egress():
    (policy,) = by_kind("NetworkPolicy")
    pod = rendered_pod(ResourceLimits())
    assert policy["metadata"]["namespace"] == pod["metadata"]["namespace"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == MANAGED_BY and selector.items() <= pod["metadata"]["labels"].items()
    assert "Egress" in policy["spec"]["policyTypes"] and policy["spec"]["egress"] == []


def test_a_campaign_that_opted_a_variant_into_network_labels_its_own_pods_for_an_egress_policy():
    """The deny-all policy still selects them (its own trials get none, per command); the label is what an
    operator's policy allowing egress selects, and the pods are others than a closed campaign's."""
    (policy,) = by_kind("NetworkPolicy")
    closed, opened = rendered_pod(ResourceLimits()), rendered_pod(ResourceLimits(), network=True)
    validate(opened)
    assert NETWORK_LABEL not in closed["metadata"]["labels"]
    assert opened["metadata"]["labels"][NETWORK_LABEL] == NETWORK_OPTED_IN
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= opened["metadata"]["labels"].items()
    assert opened["metadata"]["name"] != closed["metadata"]["name"]


def test_rbac_lets_the_run_pods_service_account_do_what_the_backend_does():
    namespace = by_kind("Namespace")[0]["metadata"]["name"]
    (account,) = by_kind("ServiceAccount")
    roles = {r["metadata"]["name"]: r for r in by_kind("Role") if r["metadata"]["namespace"] == namespace}
    bindings = [b for b in by_kind("RoleBinding") if b["metadata"]["namespace"] == namespace]
    (binding,) = bindings
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}
    ]
    rules = {
        resource: set(rule["verbs"])
        for rule in roles[binding["roleRef"]["name"]]["rules"]
        for resource in rule["resources"]
    }
    assert rules["pods"] >= {"create", "get", "list", "delete"}  # create, readiness wait, janitor
    assert "create" in rules["pods/exec"]
    assert not any("*" in verbs for verbs in rules.values())
    run_pods = values()["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]
    assert run_pods["serviceAccountName"] == account["metadata"]["name"]


def test_the_helm_values_configure_runs_storage_and_queues_and_their_pods_are_valid():
    chart = values()
    (deployment,) = chart["dagster-user-deployments"]["deployments"]
    secrets = [{"name": s["metadata"]["name"]} for s in by_kind("Secret")]
    launcher_secrets = chart["runLauncher"]["config"]["k8sRunLauncher"]["envSecrets"]
    assert secrets and all(s in deployment["envSecrets"] and s in launcher_secrets for s in secrets), (
        "the S3 credentials and the results key reach the code location and every run worker"
    )
    assert any("EVAL_PIPELINE_RESULTS_KEY" in s["stringData"] for s in by_kind("Secret"))
    env = {item["name"]: item["value"] for item in deployment["env"]}
    assert env["EVAL_PIPELINE_K8S_NAMESPACE"] == by_kind("Namespace")[0]["metadata"]["name"]
    assert env["EVAL_PIPELINE_ARTIFACTS"].startswith("s3://")
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "eval_pipeline.definitions"]
    # The deployment's Kubernetes parts, as the pod the chart makes of them.
    validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": deployment["name"]},
            "spec": {
                "containers": [
                    {
                        "name": "user-code",
                        "image": f"{deployment['image']['repository']}:{deployment['image']['tag']}",
                        "env": deployment["env"],
                        "envFrom": [{"secretRef": s} for s in deployment["envSecrets"]],
                        "resources": deployment["resources"],
                    }
                ]
            },
        }
    )
    launcher = chart["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    run_config = launcher["config"]["k8sRunLauncher"]["runK8sConfig"]
    container = {"name": "run", "image": "x", **run_config["containerConfig"]}
    validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "run"},
            "spec": {**run_config["podSpecConfig"], "containers": [container]},
        }
    )
    assert chart["computeLogManager"]["type"] == "S3ComputeLogManager"
    assert set(chart["postgresql"]) >= {
        "postgresqlHost",
        "postgresqlUsername",
        "postgresqlPassword",
        "postgresqlDatabase",
    }
    daemon = chart["dagsterDaemon"]
    queue = daemon["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert daemon["runCoordinator"]["type"] == "QueuedRunCoordinator"
    assert {limit["key"] for limit in queue["tagConcurrencyLimits"]} == {STAGE_TAG}
    assert daemon["runMonitoring"]["enabled"] and daemon["runRetries"]["enabled"]
    assert daemon["runRetries"]["retryOnAssetOrOpFailure"] is False, "agent failures are never retried"


def test_the_webserver_and_the_daemon_create_runs_with_the_clis_process_environment():
    chart = values()
    for component in ("dagsterWebserver", "dagsterDaemon"):
        env = {item["name"]: item["value"] for item in chart[component]["env"]}
        assert env.items() >= PROCESS_ENVIRONMENT.items(), component


def test_a_trial_runs_pod_gets_the_floor_as_request_and_the_ceiling_as_limit(monkeypatch, tmp_path):
    """The trials job's `dagster-k8s/config` tag, turned into a run's Job by dagster-k8s itself. Only on a
    cluster: a local run carries no such tag."""
    monkeypatch.setenv("EVAL_PIPELINE_DATA_DIR", str(tmp_path))
    campaign = load_campaign("demo")
    local = build_definitions([campaign]).resolve_job_def(stage_job_name(campaign, "trials"))
    assert "dagster-k8s/config" not in local.tags
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # what Kubernetes sets in every pod
    defs = build_definitions([campaign])
    job = defs.resolve_job_def(stage_job_name(campaign, "trials"))
    tags = {key: value if isinstance(value, str) else json.dumps(value) for key, value in job.tags.items()}
    k8s_job = construct_dagster_k8s_job(
        DagsterK8sJobConfig(
            job_image="registry.example.com/eval-pipeline:0.1.0", dagster_home="/opt/dagster/dagster_home"
        ),
        ["dagster", "api", "execute_run"],
        "dagster-run-1",
        user_defined_k8s_config=get_user_defined_k8s_config(tags),
    )
    manifest = ApiClient().sanitize_for_serialization(k8s_job)
    validate(manifest)
    resources = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"memory": f"{campaign.resources.memory_floor_mb}Mi", "cpu": "500m"},
        "limits": {"memory": f"{campaign.resources.memory_ceiling_mb}Mi", "cpu": "1000m"},
    }
    steps = {node.name: node.tags for node in job.nodes if node.name.endswith("trials")}
    assert steps and all(
        json.loads(t["dagster-k8s/config"]) == json.loads(tags["dagster-k8s/config"]) for t in steps.values()
    )


def test_production_variables_choose_the_k8s_executor_and_step_outputs_on_s3(monkeypatch, tmp_path):
    monkeypatch.setenv("EVAL_PIPELINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EVAL_PIPELINE_EXECUTOR", "k8s")
    monkeypatch.setenv("EVAL_PIPELINE_ARTIFACTS", "s3://evals/nightly")
    defs = build_definitions([load_campaign("demo")])
    assert defs.executor.name == "k8s"
    io_manager = defs.resources["io_manager"]
    assert (type(io_manager).__name__, io_manager.s3_bucket, io_manager.s3_prefix) == (
        "S3PickleIOManager",
        "evals",
        "nightly/io",
    )
    assert defs.resources["eval_pipeline"].artifacts == "s3://evals/nightly"
    monkeypatch.delenv("EVAL_PIPELINE_EXECUTOR")
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS")
    embedded = build_definitions([load_campaign("demo")])
    assert embedded.executor.name == "in_process" and "io_manager" not in (embedded.resources or {})
