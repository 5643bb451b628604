"""The `eval-pipeline` command: run or resume a campaign against the DAGSTER_HOME instance."""

import argparse
import atexit
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval_pipeline.common.settings import Deployment, DeploymentError, Paths, dagster_home

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from eval_pipeline.config.campaign import Campaign
    from eval_pipeline.datasets.portfolio import Portfolio
    from eval_pipeline.defs.progress import Cycle
    from eval_pipeline.orchestration.launchers import Launcher
    from eval_pipeline.trial.selection import TrialSelection


class UsageError(ValueError):
    """An argument or input the command cannot use."""


def _use_dagster_home() -> None:
    """Point Dagster at the CLI's instance (DAGSTER_HOME, or the default) before it reads the variable,
    with the instance settings the deployment's variables choose (unless the user keeps their own)."""
    from eval_pipeline.orchestration.instance_config import ensure_instance_config, use_process_environment

    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    ensure_instance_config(home, Deployment.from_env())
    use_process_environment()


def _quiet_libraries() -> None:
    """Keep the libraries' own chatter off the user's terminal, unless they ask for it by setting the variables
    themselves: the datasets and hub libraries' download progress bars (one per file of a dataset), and
    migrations' INFO lines when a storage is created (alembic, under Dagster's SQL storages)."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Dagster's BetaWarnings (data versions are beta; we rely on them knowingly), matched by their text so that
    # a command need not import Dagster to silence them.
    warnings.filterwarnings("ignore", message=r".* is currently in beta")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _LiveLine:
    """A status line rewritten in place at the bottom of a terminal (stderr), lines said above it."""

    def __init__(self) -> None:
        self.status = ""

    def say(self, line: str) -> None:
        sys.stderr.write(f"\r\x1b[K{line}\n{self.status}")
        sys.stderr.flush()

    def show(self, status: str) -> None:
        self.status = status
        sys.stderr.write(f"\r\x1b[K{status}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.status:
            sys.stderr.write("\n")


@contextmanager
def _telling() -> Iterator[tuple[Callable[[str], None], Callable[[str], None] | None]]:
    """(say, show): on a terminal a live status line and the lines worth a person's attention above it; elsewhere
    plain lines, each trial's carrying the tally (orchestration/tally.py)."""
    if not sys.stderr.isatty():
        yield _say, None
        return
    live = _LiveLine()
    try:
        yield live.say, live.show
    finally:
        live.close()


@contextmanager
def _campaign_session(
    args: argparse.Namespace, campaign: "Campaign"
) -> Iterator[tuple["DagsterInstance", "Launcher", "Cycle"]]:
    """The Dagster instance, a launcher and a new cycle for a command over `campaign`. The run workers are
    forked first, before this process opens the instance or starts a thread (run_workers.py); if the instance
    cannot be opened, or Ctrl-C comes first, they are killed rather than left to finish starting."""
    from eval_pipeline.orchestration.run_workers import (
        embedded_run_workers,
        hold_connections,
        open_instance,
        stop_run_workers,
    )

    workers = embedded_run_workers(campaign, Paths.from_env(), args.workers)
    try:
        from eval_pipeline.orchestration.driver import new_cycle
        from eval_pipeline.orchestration.launchers import open_launcher

        instance = open_instance()
        hold_connections(instance)
    except BaseException:
        if workers is not None:
            stop_run_workers(workers)
        raise
    with instance, open_launcher(campaign, Paths.from_env(), instance, args.workers, workers) as launcher:
        yield instance, launcher, new_cycle(campaign)


def _load(name: str) -> "Campaign":
    """The campaign, with the CLI's Dagster instance set up for the command that runs it."""
    from eval_pipeline.config.campaign import load_campaign

    campaign = load_campaign(name)
    _use_dagster_home()
    return campaign


def _run(args: argparse.Namespace) -> int:
    campaign = _load(args.campaign)
    with _campaign_session(args, campaign) as (instance, launcher, cycle), _telling() as (say, show):
        from eval_pipeline.orchestration.campaign_run import run_campaign
        from eval_pipeline.results.markdown import render_summary

        run = run_campaign(campaign, instance, launcher, cycle, Paths.from_env(), say, _selection(args), show)
    if args.json:
        print(json.dumps(run.as_json(), indent=2, sort_keys=True))
    else:
        print(render_summary(run.report), end="")
    for line in (failures := run.failures()):
        print(f"eval-pipeline run: {line}", file=sys.stderr)
    return 1 if failures else 0


def _grade(args: argparse.Namespace) -> int:
    """Write the grading campaign's file under the data directory, then run it as `run` runs a campaign."""
    import yaml

    from eval_pipeline.config.grading import grading_campaign
    from eval_pipeline.results.report import write_text_atomically

    try:
        mirrors = Path(args.mirror_dir) if args.mirror_dir else None
        campaign = grading_campaign(Path(args.predictions), args.dataset, args.backend, mirrors)
    except ValueError as error:
        raise UsageError(str(error)) from None
    path = Paths.from_env().data_dir / "campaigns" / f"{campaign['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, yaml.safe_dump(campaign, sort_keys=False))
    _say(f"campaign file: {path} (EVAL_PIPELINE_CAMPAIGNS={path} loads it in the Dagster UI)")
    args.campaign = str(path)
    return _run(args)


def _validate(args: argparse.Namespace) -> int:
    """Exit 0 when every instance is valid, 1 when some are not (or could not be validated), 2 when the
    campaign or its dataset cannot be used."""
    from eval_pipeline.orchestration.validation_run import DatasetNotLoaded, run_validation
    from eval_pipeline.results.markdown import render_selected_validation, render_validation
    from eval_pipeline.trial.validation import VALIDATION_FILE, all_valid

    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    campaign = _load(args.campaign)
    try:
        with _campaign_session(args, campaign) as (instance, launcher, cycle):
            validation = run_validation(
                campaign, instance, launcher, cycle, Paths.from_env(), args.repeats, _say, _selection(args)
            )
    except DatasetNotLoaded as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps(validation, indent=2, sort_keys=True))
    elif "selected" in validation:
        print(render_selected_validation(validation["selected"]))
    else:
        print(render_validation(validation))
        print(f"Validation: {Paths.from_env().reports / campaign.name / VALIDATION_FILE}")
    return 0 if all_valid(validation) else 1


def _calibrate(args: argparse.Namespace) -> int:
    from eval_pipeline.orchestration.campaign_run import run_campaign
    from eval_pipeline.results.calibration import (
        at_multiplier,
        calibration_rows,
        multiplier_label,
        parse_multipliers,
        render_calibration,
    )
    from eval_pipeline.results.report import write_json, write_text_atomically

    try:
        multipliers = parse_multipliers(args.multipliers)  # every one checked before any campaign runs
    except ValueError as error:
        raise UsageError(str(error)) from None
    campaign = _load(args.campaign)
    reports, runs = {}, {}
    for multiplier in multipliers:
        scaled = at_multiplier(campaign, multiplier)
        with _campaign_session(args, scaled) as (instance, launcher, cycle):
            run = run_campaign(scaled, instance, launcher, cycle, Paths.from_env(), _say)
        reports[multiplier_label(multiplier)], runs[multiplier_label(multiplier)] = run.report, run.as_json()
    calibration = {"campaign": campaign.name, "rows": calibration_rows(reports), "runs": runs}
    directory = Paths.from_env().reports / campaign.name
    write_json(calibration, directory / "calibration.json")
    markdown = render_calibration(calibration["rows"])
    write_text_atomically(directory / "calibration.md", markdown)
    print(json.dumps(calibration, indent=2, sort_keys=True) if args.json else markdown)
    return 0


def _portfolio(campaign: "Campaign", paths: Paths) -> "Portfolio":
    """The campaign's portfolio for a command that reads its stored trials; a dataset that cannot be loaded (an
    invalid row: an id that is no id, a missing file) is the user's to fix, said in a UsageError."""
    from eval_pipeline.datasets.sources import DatasetSourceError, load_portfolio
    from eval_pipeline.tasks.dataset import InvalidDatasetError

    try:
        return load_portfolio(campaign.slices, paths).excluding(campaign.exclude)
    except (DatasetSourceError, InvalidDatasetError) as error:
        raise UsageError(str(error)) from None


def _export(args: argparse.Namespace) -> int:
    """Write each trial's folder (instruction, patch, trajectory, test output, outcome, lineage, attempts) from the store."""
    from eval_pipeline.results.export import ExportError, export_trials
    from eval_pipeline.trial.harness import Harness

    campaign = _load(args.campaign)
    harness = Harness.from_env()
    portfolio = _portfolio(campaign, harness.paths)
    store = harness.store.reading_only()
    try:
        folders = export_trials(
            campaign, portfolio, harness.sandbox_for(campaign), store, Path(args.to), _selection(args)
        )
    except ExportError as error:
        raise UsageError(str(error)) from None
    if suspicion := store.wrong_key_suspected():
        raise UsageError(suspicion)
    print(f"{len(folders)} trial folder(s) under {args.to}")
    return 0


def _view(args: argparse.Namespace) -> int:
    """Serve the campaign's trials as web pages (results/viewer.py) until interrupted."""
    from eval_pipeline.results.viewer import TrialPages, serve
    from eval_pipeline.trial.harness import Harness
    from eval_pipeline.trial.records import read_trials

    campaign = _load(args.campaign)
    harness = Harness.from_env()
    portfolio = _portfolio(campaign, harness.paths)
    store, sandbox_for = harness.store.reading_only(), harness.sandbox_for(campaign)
    pages = TrialPages(
        campaign.name,
        lambda selection: read_trials(campaign, portfolio, sandbox_for, store, selection),
        lambda instance_id: portfolio.instance(instance_id).instruction,
    )
    try:
        server = serve(pages, args.host, args.port)
    except OSError as error:
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {error.strerror}") from None
    host, port = server.server_address[:2]
    print(f"Trials of campaign {campaign.name}: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    with server:
        server.serve_forever()
    return 0


def _report(args: argparse.Namespace) -> int:
    """Write a campaign's report.html again from its stored report and results, with the trajectories of the
    trials chosen by --trial (default: the failed ones) among those the filters select, at most --limit of them;
    the rest of the page stays the whole campaign's."""
    from eval_pipeline.config.campaign import load_campaign
    from eval_pipeline.results.html import write_html_report
    from eval_pipeline.results.matrix import trial_id, unscored_reasons
    from eval_pipeline.results.model import REPORT_FILES, ReportError, load_report
    from eval_pipeline.results.trajectory import trajectories_for
    from eval_pipeline.results.warehouse import read_attempts_table, read_results_table
    from eval_pipeline.trial.harness import Harness

    if args.trajectories < 0:
        raise UsageError(f"--limit must be at least 0, got {args.trajectories}")
    campaign = load_campaign(args.campaign)
    harness = Harness.from_env()
    directory = harness.paths.reports / campaign.name
    results_path = harness.fetch(harness.paths.results / f"{campaign.name}.duckdb")
    if not results_path.exists():
        raise UsageError(f"campaign {campaign.name} has no results yet: eval-pipeline run --campaign {args.campaign}")
    try:
        report = load_report(harness.fetch(directory / REPORT_FILES["json"]))
    except ReportError as error:
        raise UsageError(str(error)) from None
    rows = read_results_table(results_path)
    chosen = set(args.trial) if args.trial else None
    if chosen and (unknown := sorted(chosen - {trial_id(row) for row in rows})):
        raise UsageError(
            f"campaign {campaign.name} has no trial {', '.join(map(repr, unknown))}"
            " (a trial is named <instance id>|<variant>-s<seed>)"
        )
    store = harness.store.reading_only()
    trajectories = trajectories_for(_selection(args).pick(rows), store, chosen, args.trajectories)
    if suspicion := store.wrong_key_suspected():
        raise UsageError(suspicion)
    reasons = unscored_reasons(read_attempts_table(results_path))
    path = write_html_report(report.model_copy(update={"directory": str(directory)}), rows, trajectories, reasons)
    shown = f"{len(trajectories)} trajector{'y' if len(trajectories) == 1 else 'ies'}"
    print(f"HTML report: {harness.publish(path)} ({shown})")
    return 0


def _janitor(args: argparse.Namespace) -> int:
    if args.kubernetes:
        return _kubernetes_janitor(args)
    import docker

    from eval_pipeline.sandbox.container import janitor

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
    from eval_pipeline.sandbox.kubernetes.sandbox import remove_pods

    config.load_config()
    namespace = args.namespace or SandboxSettings.from_mapping({}).namespace
    older_than = timedelta(hours=args.older_than_hours) if args.older_than_hours is not None else None
    removed = remove_pods(client.CoreV1Api(), namespace, args.campaign, older_than)
    print(json.dumps({"namespace": namespace, "removed_pods": removed}, indent=2))
    return 0


def _gate(args: argparse.Namespace) -> int:
    """Exit 0 when the report passes the gate, 1 when it fails, 2 when the inputs cannot be used."""
    from eval_pipeline.common.settings import Paths
    from eval_pipeline.config.campaign import load_campaign
    from eval_pipeline.config.gates import GatePolicyError, load_policy
    from eval_pipeline.results.gates import evaluate_gate
    from eval_pipeline.results.model import ReportError, load_report

    if not (args.campaign or (args.policy and args.report)):
        raise UsageError("give --campaign, or both --policy and --report")
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
    except (GatePolicyError, ReportError) as error:
        raise UsageError(str(error)) from None
    decision = evaluate_gate(policy, report)
    print(json.dumps(decision.model_dump(mode="json"), indent=2, sort_keys=True))
    return 0 if decision.passed else 1


def _instance_config(args: argparse.Namespace) -> int:
    from eval_pipeline.orchestration.instance_config import instance_yaml

    print(instance_yaml(Deployment.from_env(), dagster_home()), end="")
    return 0


CAMPAIGN_HELP = "a built-in campaign name or a campaign YAML path (default: demo)"


def _command(commands: Any, name: str, help: str, handler: Callable[[argparse.Namespace], int]) -> Any:
    """A subcommand of a campaign (`--campaign`, default `demo`)."""
    command = commands.add_parser(name, help=help)
    command.add_argument("--campaign", default="demo", help=CAMPAIGN_HELP)
    command.set_defaults(handler=handler)
    return command


def _workers(command: Any, help: str = "as for run") -> None:
    command.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), help=help)


def _selection_flags(command: Any, limit: bool = True) -> None:
    """Filters of the campaign's trials (trial/selection.py): each repeatable, all of them together; `--limit`
    unless the command has a limit of its own."""
    command.add_argument("--instance", action="append", default=[], metavar="ID", help="only this instance's trials")
    command.add_argument("--variant", action="append", default=[], metavar="NAME", help="only this variant's trials")
    command.add_argument("--slice", action="append", default=[], metavar="NAME", help="only this slice's trials")
    command.add_argument("--seed", action="append", default=[], type=int, metavar="N", help="only this seed's trials")
    if limit:
        command.add_argument(
            "--limit", type=int, metavar="N", help="at most N of the trials selected, in the campaign's order"
        )


def _selection(args: argparse.Namespace) -> "TrialSelection":
    from eval_pipeline.trial.selection import TrialSelection

    limit = getattr(args, "limit", None)  # a command with a --limit of its own (report) has no selection limit
    return TrialSelection(tuple(args.instance), tuple(args.variant), tuple(args.slice), tuple(args.seed), limit)


def _add_campaign_commands(commands: Any) -> None:
    """run, validate and calibrate: the commands that run trials through Dagster."""
    run = _command(commands, "run", "run or resume a campaign in process", _run)
    run.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    _workers(run, "trial runs in parallel processes (default: cores, at most 4)")
    _selection_flags(run)
    validate = _command(
        commands,
        "validate",
        "check that each instance's reference solution resolves it and the unchanged repository does not;"
        " exit 1 when some instance is not valid",
        _validate,
    )
    validate.add_argument(
        "--repeats", type=int, default=3, help="how many times each patch is graded, in fresh workspaces (default 3)"
    )
    validate.add_argument("--json", action="store_true", help="print the validation report as JSON")
    _workers(validate)
    _selection_flags(validate)
    calibrate = _command(
        commands,
        "calibrate",
        "run a campaign at several resource multipliers and compare rates and infra errors",
        _calibrate,
    )
    calibrate.add_argument("--multipliers", default="1,3,uncapped", help="comma-separated: numbers or 'uncapped'")
    calibrate.add_argument("--json", action="store_true", help="print the calibration as JSON")
    _workers(calibrate)


def _add_grade_command(commands: Any) -> None:
    """grade: a predictions file graded on a dataset, without a campaign file."""
    grade = commands.add_parser(
        "grade", help="grade a predictions file (SWE-bench's format) on a dataset, as a campaign of its own"
    )
    grade.add_argument("--predictions", required=True, metavar="FILE", help="JSON or JSON Lines, SWE-bench's fields")
    grade.add_argument(
        "--dataset", default="demo", help="demo, hf:<name>@<revision>[:<split>], or a file or folder of SWE-bench rows"
    )
    grade.add_argument(
        "--mirror-dir", metavar="DIR", help="clone the rows' repositories from the mirrors in DIR, not from GitHub"
    )
    grade.add_argument(
        "--backend",
        choices=["container", "kubernetes", "local"],
        default="container",
        help="the sandbox (default container)",
    )
    grade.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    _workers(grade)
    _selection_flags(grade)
    grade.set_defaults(handler=_grade)


def _add_reading_commands(commands: Any) -> None:
    """export, view and report: the commands that read what a campaign stored."""
    export = _command(
        commands,
        "export",
        "write a folder per trial (instruction, patch, trajectory, test output, outcome, lineage, attempts)",
        _export,
    )
    export.add_argument("--to", required=True, help="the directory to write the folders under")
    _selection_flags(export)
    view = _command(commands, "view", "serve the campaign's trials as web pages: a matrix and a page per trial", _view)
    view.add_argument("--port", type=int, default=8765, help="the port to serve on (default 8765; 0: any free one)")
    view.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1: this machine only)")
    report = _command(
        commands,
        "report",
        "write a campaign's HTML report again from its stored results, with the trajectories of its failed"
        " trials or of the trials chosen",
        _report,
    )
    report.add_argument(
        "--trial",
        action="append",
        metavar="INSTANCE|TRIAL",
        help="a trial whose trajectory to show, as <instance id>|<variant>-s<seed>; repeat for more"
        " (default: the failed trials, scored and not resolved)",
    )
    report.add_argument(
        "--limit", dest="trajectories", type=int, default=20, help="at most this many trajectories (default 20)"
    )
    _selection_flags(report, limit=False)


def _add_operations_commands(commands: Any) -> None:
    """janitor, gate and instance-config: operating a deployment."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eval-pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_campaign_commands(commands)
    _add_grade_command(commands)
    _add_reading_commands(commands)
    _add_operations_commands(commands)
    _quiet_libraries()
    return _handle(parser.parse_args(argv))


def _handle(args: argparse.Namespace) -> int:
    """Run the command; an expected failure is one line on stderr and an exit code, never a traceback."""
    from eval_pipeline.config.campaign import CampaignError
    from eval_pipeline.orchestration.errors import CampaignRunError, LaunchError
    from eval_pipeline.sandbox import EngineUnreachable
    from eval_pipeline.trial.selection import SelectionError

    try:
        return args.handler(args)
    except (DeploymentError, CampaignError, UsageError, SelectionError) as error:
        print(f"eval-pipeline {args.command}: {error}", file=sys.stderr)
        return 2
    except (CampaignRunError, LaunchError, EngineUnreachable) as error:
        print(f"eval-pipeline {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"eval-pipeline {args.command}: interrupted; what finished is kept. Run the same command again to resume.",
            file=sys.stderr,
        )
        return 130


def console_main() -> None:
    """The `eval-pipeline` command: `main`, then an exit that skips the interpreter's teardown. Freeing each of
    the thousands of modules and objects that Dagster brings, one by one, took about 0.9 s after the work was
    done, changing nothing. The exit is an exit handler registered after `logging`'s (this module imports it
    first), so it runs before that one: it shuts logging down itself, then flushes the streams."""
    code = 1  # what an exception escaping `main` exits with, once Python has printed it

    def end() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader that went away (`| head`), a stream already closed
                pass
        os._exit(code)

    atexit.register(end)
    try:
        code = main()
    except SystemExit as stop:  # argparse's usage errors and --help
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        raise
    except KeyboardInterrupt:  # a second Ctrl-C while the first is handled
        code = 130
        raise


if __name__ == "__main__":
    console_main()
