"""The `eval-pipeline` command: run or resume a campaign against the DAGSTER_HOME instance."""

import argparse
import json
import os
import sys
import warnings
from datetime import timedelta
from pathlib import Path

from eval_pipeline.settings import Deployment, DeploymentError, dagster_home


def _use_dagster_home() -> None:
    """Point Dagster at the CLI's instance (DAGSTER_HOME, or the default) before it reads the variable,
    with the instance settings the deployment's variables choose (unless the user keeps their own)."""
    from eval_pipeline.instance_config import ensure_instance_config

    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    ensure_instance_config(home, Deployment.from_env())
    from dagster import BetaWarning

    warnings.filterwarnings("ignore", category=BetaWarning)  # data versions are beta; we rely on them knowingly


def _run(args: argparse.Namespace) -> int:
    _use_dagster_home()
    from dagster import DagsterInstance

    from eval_pipeline.campaign import CampaignError, load_campaign
    from eval_pipeline.defs import build_definitions
    from eval_pipeline.markdown_report import render_summary
    from eval_pipeline.runner import CampaignRunError, run_campaign

    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as error:
        print(f"eval-pipeline: {error}", file=sys.stderr)
        return 2
    with DagsterInstance.get() as instance:
        try:
            run = run_campaign(
                campaign,
                build_definitions([campaign]),
                instance,
                progress=lambda line: print(line, file=sys.stderr),
                workers=args.workers,
            )
        except CampaignRunError as error:
            print(f"eval-pipeline: {error}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(run.as_json(), indent=2, sort_keys=True))
    else:
        print(render_summary(run.report), end="")
    return 0


def _validate(args: argparse.Namespace) -> int:
    """Exit 0 when every instance is valid, 1 when some are not (or could not be validated), 2 when the
    campaign or its dataset cannot be used."""
    if args.repeats < 1:
        print(f"eval-pipeline validate: --repeats must be at least 1, got {args.repeats}", file=sys.stderr)
        return 2
    _use_dagster_home()
    from dagster import DagsterInstance

    from eval_pipeline.campaign import CampaignError, load_campaign
    from eval_pipeline.defs import build_definitions
    from eval_pipeline.defs.validation import DatasetNotLoaded, ValidationRunError, run_validation
    from eval_pipeline.markdown_report import render_validation
    from eval_pipeline.settings import Paths
    from eval_pipeline.validation import VALIDATION_FILE, all_valid

    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as error:
        print(f"eval-pipeline validate: {error}", file=sys.stderr)
        return 2
    with DagsterInstance.get() as instance:
        try:
            validation = run_validation(
                campaign,
                build_definitions([campaign]),
                instance,
                args.repeats,
                progress=lambda line: print(line, file=sys.stderr),
            )
        except DatasetNotLoaded as error:
            print(f"eval-pipeline validate: {error}", file=sys.stderr)
            return 2
        except ValidationRunError as error:
            print(f"eval-pipeline validate: {error}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(validation, indent=2, sort_keys=True))
    else:
        print(render_validation(validation))
        print(f"Validation: {Paths.from_env().reports / campaign.name / VALIDATION_FILE}")
    return 0 if all_valid(validation) else 1


def _calibrate(args: argparse.Namespace) -> int:
    _use_dagster_home()
    from dagster import DagsterInstance

    from eval_pipeline.calibration import parse_multipliers, render_calibration, run_calibration
    from eval_pipeline.campaign import CampaignError, load_campaign
    from eval_pipeline.report import write_json, write_text_atomically
    from eval_pipeline.runner import CampaignRunError
    from eval_pipeline.settings import Paths

    try:
        multipliers = parse_multipliers(args.multipliers)  # every one checked before any campaign runs
        campaign = load_campaign(args.campaign)
        with DagsterInstance.get() as instance:
            calibration = run_calibration(
                campaign, multipliers, instance, lambda line: print(line, file=sys.stderr), args.workers
            )
    except (CampaignError, ValueError) as error:
        print(f"eval-pipeline: {error}", file=sys.stderr)
        return 2
    except CampaignRunError as error:
        print(f"eval-pipeline: {error}", file=sys.stderr)
        return 1
    directory = Paths.from_env().reports / campaign.name
    write_json(calibration, directory / "calibration.json")
    markdown = render_calibration(calibration["rows"])
    write_text_atomically(directory / "calibration.md", markdown)
    print(json.dumps(calibration, indent=2, sort_keys=True) if args.json else markdown)
    return 0


def _janitor(args: argparse.Namespace) -> int:
    if args.kubernetes:
        return _kubernetes_janitor(args)
    import docker

    from eval_pipeline.sandbox import janitor

    client = docker.from_env()
    report = {"removed_containers": janitor.remove_containers(client, args.campaign)}
    if args.prune_images_older_than_days is not None:
        report["removed_images"] = janitor.prune_images(client, timedelta(days=args.prune_images_older_than_days))
    report["disk_usage"] = janitor.disk_usage(client)
    print(json.dumps(report, indent=2))
    return 0


def _kubernetes_janitor(args: argparse.Namespace) -> int:
    """Delete leaked environment pods: finished ones, and (with --older-than-hours) long-lived ones."""
    from kubernetes import client, config

    from eval_pipeline.sandbox.base import SandboxSettings
    from eval_pipeline.sandbox.kubernetes import remove_pods

    config.load_config()
    namespace = args.namespace or SandboxSettings.from_mapping({}).namespace
    older_than = timedelta(hours=args.older_than_hours) if args.older_than_hours is not None else None
    removed = remove_pods(client.CoreV1Api(), namespace, args.campaign, older_than)
    print(json.dumps({"namespace": namespace, "removed_pods": removed}, indent=2))
    return 0


def _gate(args: argparse.Namespace) -> int:
    """Exit 0 when the report passes the gate, 1 when it fails, 2 when the inputs cannot be used."""
    from eval_pipeline.campaign import CampaignError, load_campaign
    from eval_pipeline.gates import GatePolicyError, evaluate_gate, load_policy
    from eval_pipeline.report_model import ReportError, load_report
    from eval_pipeline.settings import Paths

    if not (args.campaign or (args.policy and args.report)):
        print("eval-pipeline gate: give --campaign, or both --policy and --report", file=sys.stderr)
        return 2
    try:
        campaign = load_campaign(args.campaign) if args.campaign else None
        if args.policy:
            policy = load_policy(Path(args.policy))
        else:
            policies = {policy.environment: policy for policy in campaign.gates} if campaign else {}
            if args.environment not in policies:
                raise GatePolicyError(f"campaign {args.campaign!r} has no gate for environment {args.environment!r}")
            policy = policies[args.environment]
        report_path = Path(args.report) if args.report else Paths.from_env().reports / campaign.name / "report.json"
        report = load_report(report_path)
    except (CampaignError, GatePolicyError, ReportError) as error:
        print(f"eval-pipeline gate: {error}", file=sys.stderr)
        return 2
    decision = evaluate_gate(policy, report)
    print(json.dumps(decision.model_dump(mode="json"), indent=2, sort_keys=True))
    return 0 if decision.passed else 1


def _instance_config(args: argparse.Namespace) -> int:
    from eval_pipeline.instance_config import instance_yaml

    print(instance_yaml(Deployment.from_env()), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eval-pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run or resume a campaign in process")
    run.add_argument("--campaign", default="demo", help="a built-in campaign name or a campaign YAML path")
    run.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    run.add_argument(
        "--workers",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="trial runs in parallel processes (default: cores, at most 4)",
    )
    run.set_defaults(handler=_run)
    validate = commands.add_parser(
        "validate",
        help="check that each instance's reference solution resolves it and the unchanged repository does not;"
        " exit 1 when some instance is not valid",
    )
    validate.add_argument("--campaign", default="demo", help="a built-in campaign name or a campaign YAML path")
    validate.add_argument(
        "--repeats", type=int, default=3, help="how many times each patch is graded, in fresh workspaces (default 3)"
    )
    validate.add_argument("--json", action="store_true", help="print the validation report as JSON")
    validate.set_defaults(handler=_validate)
    calibrate = commands.add_parser(
        "calibrate", help="run a campaign at several resource multipliers and compare rates and infra errors"
    )
    calibrate.add_argument("--campaign", default="demo", help="a built-in campaign name or a campaign YAML path")
    calibrate.add_argument("--multipliers", default="1,3,uncapped", help="comma-separated: numbers or 'uncapped'")
    calibrate.add_argument("--json", action="store_true", help="print the calibration as JSON")
    calibrate.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), help="as for run")
    calibrate.set_defaults(handler=_calibrate)
    janitor = commands.add_parser(
        "janitor", help="remove leaked containers (and old images) from the container engine, or leaked pods"
    )
    janitor.add_argument("--campaign", help="only this campaign's containers or pods (default: all of eval_pipeline's)")
    janitor.add_argument(
        "--prune-images-older-than-days", type=float, help="also remove eval_pipeline images older than this, if unused"
    )
    janitor.add_argument(
        "--kubernetes", action="store_true", help="environment pods on the cluster (KUBECONFIG or in-cluster)"
    )
    janitor.add_argument("--namespace", help="with --kubernetes: the pods' namespace (EVAL_PIPELINE_K8S_NAMESPACE)")
    janitor.add_argument(
        "--older-than-hours",
        type=float,
        help="with --kubernetes: only pods this old, and finished ones (default: every pod, as after a campaign)",
    )
    janitor.set_defaults(handler=_janitor)
    gate = commands.add_parser(
        "gate", help="check a campaign's report against a release gate; exit 1 when it fails (for other CI systems)"
    )
    gate.add_argument("--campaign", help="the campaign whose gate and report to use")
    gate.add_argument("--environment", default="staging", help="the campaign's gate for this environment")
    gate.add_argument("--policy", help="a gate policy file instead of the campaign's")
    gate.add_argument("--report", help="a report.json instead of the campaign's latest")
    gate.set_defaults(handler=_gate)
    commands.add_parser(
        "instance-config", help="print the dagster.yaml that the deployment's environment variables choose"
    ).set_defaults(handler=_instance_config)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except DeploymentError as error:
        print(f"eval-pipeline: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
