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
from typing import TYPE_CHECKING, Any, cast

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.settings import DEFAULT_DAGSTER_HOME, Deployment, DeploymentError, Paths, dagster_home

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from eval_pipeline.config.campaign import Campaign
    from eval_pipeline.datasets.portfolio import Portfolio
    from eval_pipeline.defs.progress import Cycle
    from eval_pipeline.orchestration.launchers import Launcher
    from eval_pipeline.orchestration.live_line import LiveStatus
    from eval_pipeline.trial.selection import TrialSelection


class UsageError(ValueError):
    """An argument or input the command cannot use."""


def _use_dagster_home() -> None:
    """Point Dagster at the CLI's instance (DAGSTER_HOME, or the default) before it reads the variable,
    with the instance settings the deployment's variables choose (unless the user keeps their own); a DAGSTER_HOME
    that cannot be created or written is a UsageError naming it."""
    from eval_pipeline.orchestration.instance_config import ensure_instance_config, use_process_environment

    home = dagster_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        ensure_instance_config(home, Deployment.from_env())
    except OSError as error:
        raise UsageError(
            f"DAGSTER_HOME {home}: cannot write there ({error.strerror}: {error.filename});"
            " set DAGSTER_HOME to a directory you can write"
        ) from None
    os.environ["DAGSTER_HOME"] = str(home)
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


def _print_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _progress_output() -> Iterator[
    tuple[Callable[[str], None], "Callable[[Callable[[], str]], None] | None", "LiveStatus"]
]:
    """(print_line, show, status) for a campaign's run (orchestration/live_line.py): on a terminal a live line redrawn
    every second (the time spent, the tally, each run in flight and for how long) with the lines worth a
    person's attention above it, `show` handing it the tally; elsewhere plain lines, each trial's carrying the
    tally (orchestration/tally.py), and `status` said as a line of its own after a minute without any line."""
    from eval_pipeline.orchestration.live_line import Heartbeat, LiveLine, LiveStatus

    status = LiveStatus()
    if not sys.stderr.isatty():
        with Heartbeat(status, sys.stderr) as heartbeat:
            yield heartbeat.print_line, None, status
        return
    with LiveLine(status, sys.stderr) as live:
        yield live.print_line, live.show, status


@contextmanager
def _campaign_session(
    args: argparse.Namespace, campaign: "Campaign"
) -> Iterator[tuple["DagsterInstance", "Launcher", "Cycle"]]:
    """The Dagster instance, a launcher and a new cycle for a command over `campaign`. The run workers are
    forked first, before this process opens the Dagster instance or starts a thread (run_workers.py); if the instance
    cannot be opened, or Ctrl-C comes first, they are killed rather than left to finish starting."""
    from eval_pipeline.orchestration.run_workers import (
        embedded_run_workers,
        hold_connections,
        open_dagster_instance,
        stop_run_workers,
    )

    workers = embedded_run_workers(campaign, Paths.from_env(), args.workers)
    try:
        from eval_pipeline.orchestration.driver import new_cycle
        from eval_pipeline.orchestration.launchers import open_launcher

        dagster_instance = open_dagster_instance()
        hold_connections(dagster_instance)
    except BaseException:
        if workers is not None:
            stop_run_workers(workers)
        raise
    with (
        dagster_instance,
        open_launcher(campaign, Paths.from_env(), dagster_instance, args.workers, workers) as launcher,
    ):
        yield dagster_instance, launcher, new_cycle(campaign)


def _campaign_source(name: str) -> str:
    """`--campaign` as load_campaign reads it: a built-in campaign's name or a file's path as given, and the name
    `grade` printed (its campaign's file under the data directory) as that file's path."""
    from eval_pipeline.config.campaign import builtin_campaigns
    from eval_pipeline.config.grade_campaign import campaign_file

    if name in builtin_campaigns() or Path(name).is_file() or not name.isidentifier():
        return name
    graded = campaign_file(Paths.from_env().data_dir, name)
    return str(graded) if graded.is_file() else name


def _load(name: str) -> "Campaign":
    """The campaign (--campaign: `_campaign_source`), with the CLI's Dagster instance set up for the command that
    runs it."""
    from eval_pipeline.config.campaign import load_campaign

    campaign = load_campaign(_campaign_source(name))
    _use_dagster_home()
    return campaign


ONE_LINE_FLAGS = ("agent", "model", "seeds", "backend", "run_id", "mirror_dir")  # `run` flags only --dataset takes


def _run_command(args: argparse.Namespace) -> int:
    """`run`: the campaign --campaign names (default demo), or with --dataset the campaign of an agent on a
    dataset, written first (`_write_dataset_run`)."""
    if args.dataset is None:
        if given := [f"--{name.replace('_', '-')}" for name in ONE_LINE_FLAGS if getattr(args, name) is not None]:
            raise UsageError(f"{', '.join(given)}: only with --dataset (an agent on a dataset, without --campaign)")
        args.campaign = args.campaign or "demo"
    else:
        args.campaign = _write_dataset_run(args)
    return _run(args)


def _write_dataset_run(args: argparse.Namespace) -> str:
    """Check the flags and the campaign they make, then write it under the data directory (never over another
    campaign) and say its name; the file's path. Nothing is written before every check has passed."""
    import yaml

    from eval_pipeline.config.campaign import parse_campaign
    from eval_pipeline.config.dataset_run import dataset_run, run_conflict
    from eval_pipeline.config.grade_campaign import campaign_file
    from eval_pipeline.results.report import write_text_atomically

    if args.campaign is not None:
        raise UsageError("--campaign and --dataset: give one (--dataset runs an agent without a campaign file)")
    if args.agent is None:
        raise UsageError("--dataset needs --agent (the agent to run on it)")
    try:
        mirrors = Path(args.mirror_dir) if args.mirror_dir else None
        seeds, backend = 1 if args.seeds is None else args.seeds, args.backend or "container"
        run = dataset_run(args.dataset, args.agent, args.model, seeds, backend, mirrors, args.run_id)
    except ValueError as error:
        raise UsageError(str(error)) from None
    paths = Paths.from_env()
    path = campaign_file(paths.data_dir, run.name)
    _portfolio(parse_campaign(run.campaign, f"run id {run.run_id}", Path.cwd()), paths)  # the dataset loads
    if path.exists() and (conflict := run_conflict(path, run)):
        raise UsageError(conflict)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, yaml.safe_dump(run.campaign, sort_keys=False))
    _print_line(
        f"run id {run.run_id}: campaign {run.name} (`--campaign {run.name}` for run, view, export, report),"
        f" file {path} (EVAL_PIPELINE_CAMPAIGNS={path} loads it in the Dagster UI)"
    )
    return str(path)


def _run(args: argparse.Namespace) -> int:
    campaign = _load(args.campaign)
    with (
        _campaign_session(args, campaign) as (dagster_instance, launcher, cycle),
        _progress_output() as (print_line, show, status),
    ):
        from eval_pipeline.orchestration.campaign_run import run_campaign
        from eval_pipeline.orchestration.live_line import WatchedLauncher
        from eval_pipeline.results.markdown import render_summary

        watched = WatchedLauncher(launcher, dagster_instance, status)
        run = run_campaign(
            campaign, dagster_instance, watched, cycle, Paths.from_env(), print_line, _selection(args), show
        )
    if args.json:
        print(json.dumps(run.as_json(), indent=2, sort_keys=True))
    else:
        print(render_summary(run.final_report), end="")
    for line in [*run.agent_error_lines(), *(failures := run.failures())]:
        print(f"eval-pipeline {args.command}: {line}", file=sys.stderr)
    return 1 if failures else 0


def _grade(args: argparse.Namespace) -> int:
    """Check the predictions, the run id and the dataset, then write the grading campaign's file under the data
    directory (never over another grading's) and run it as `run` runs a campaign. Nothing is written before every
    check has passed."""
    import yaml

    from eval_pipeline.config.campaign import parse_campaign
    from eval_pipeline.config.grade_campaign import (
        GRADING_RECORD,
        ImageFlags,
        campaign_file,
        grading_campaign,
        grading_conflict,
        unknown_ids_message,
    )
    from eval_pipeline.results.report import write_text_atomically

    predictions, paths = Path(args.predictions), Paths.from_env()
    try:
        mirrors = Path(args.mirror_dir) if args.mirror_dir else None
        images = ImageFlags(args.images, args.namespace, args.instance_image_tag)
        grading = grading_campaign(predictions, args.dataset, args.backend, mirrors, args.run_id, images)
    except ValueError as error:
        raise UsageError(str(error)) from None
    path = campaign_file(paths.data_dir, grading.name)
    portfolio = _portfolio(parse_campaign(grading.campaign, str(path), Path.cwd()), paths)
    unknown = grading.unknown_ids(portfolio)
    if unknown and not args.ignore_unknown_ids:
        raise UsageError(f"{unknown_ids_message(predictions, unknown)}; --ignore-unknown-ids grades the others")
    if unknown:
        _print_line(f"eval-pipeline grade: warning: {unknown_ids_message(predictions, unknown)}: not graded")
    if path.exists() and (conflict := grading_conflict(path, grading)):
        raise UsageError(conflict)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, yaml.safe_dump(grading.campaign, sort_keys=False))
    record = paths.reports / grading.name / GRADING_RECORD
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(record, json.dumps(grading.record(unknown), indent=2, sort_keys=True))
    _print_line(
        f"run id {grading.run_id}: campaign {grading.name} (`--campaign {grading.name}` for view, export, report),"
        f" file {path} (EVAL_PIPELINE_CAMPAIGNS={path} loads it in the Dagster UI)"
    )
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
        with _campaign_session(args, campaign) as (dagster_instance, launcher, cycle):
            validation = run_validation(
                campaign,
                dagster_instance,
                launcher,
                cycle,
                Paths.from_env(),
                args.repeats,
                _print_line,
                _selection(args),
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
        with _campaign_session(args, scaled) as (dagster_instance, launcher, cycle):
            run = run_campaign(scaled, dagster_instance, launcher, cycle, Paths.from_env(), _print_line)
        reports[multiplier_label(multiplier)], runs[multiplier_label(multiplier)] = run.final_report, run.as_json()
    rows = calibration_rows(reports)
    calibration = {"campaign": campaign.name, "rows": rows, "runs": runs}
    directory = Paths.from_env().reports / campaign.name
    write_json(calibration, directory / "calibration.json")
    markdown = render_calibration(rows)
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
    """Serve the campaign's trials as web pages (results/viewer.py) until Ctrl-C, which ends it with exit 0; a
    port that cannot be bound is a UsageError pointing at --port."""
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
        portfolio.instance,
    )
    try:
        server = serve(pages, args.host, args.port)
    except OSError as error:
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {error.strerror}; choose another port with --port"
            " (--port 0: any free one)"
        ) from None
    host, port = cast(tuple[str, int], server.server_address[:2])  # an AF_INET server's
    with server:
        try:  # from the line that says Ctrl-C stops it: a Ctrl-C then is the ending it announces
            print(f"Trials of campaign {campaign.name}: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
            server.serve_forever()
        except KeyboardInterrupt:  # how a user stops the viewer: an ending, not an interruption
            print(f"Stopped serving the trials of campaign {campaign.name}.", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    """Write a campaign's report.html again from its stored report and results, with the trajectories of the
    trials chosen by --trial (default: the failed ones) among those the filters select, at most --limit of them;
    the rest of the page stays the whole campaign's."""
    from eval_pipeline.results.html import write_html_report
    from eval_pipeline.results.matrix import trial_id, unscored_reasons
    from eval_pipeline.results.model import REPORT_FILES, ReportError, load_report
    from eval_pipeline.results.trajectory import trajectories_for
    from eval_pipeline.results.warehouse import read_attempts_table, read_results_table
    from eval_pipeline.trial.harness import Harness

    if args.trajectories < 0:
        raise UsageError(f"--limit must be at least 0, got {args.trajectories}")
    campaign = _load(args.campaign)
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
    report: dict[str, Any] = {"removed_containers": janitor.remove_containers(client, args.campaign)}
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
        campaign = load_campaign(_campaign_source(args.campaign)) if args.campaign else None
        if args.policy:
            policy = load_policy(Path(args.policy))
        else:
            policies = {policy.environment: policy for policy in campaign.gates} if campaign else {}
            if args.environment not in policies:
                raise GatePolicyError(f"campaign {args.campaign!r} has no gate for environment {args.environment!r}")
            policy = policies[args.environment]
        if args.report or campaign is None:  # without --campaign, --report is given (checked above)
            report_path = Path(args.report)
        else:
            report_path = Paths.from_env().reports / campaign.name / "report.json"
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

DESCRIPTION = f"""Evaluate AI coding agents on SWE-bench-style issues and Terminal-Bench tasks.

A campaign (a YAML file, or a built-in one: demo) plans trials, instances x variants x seeds. `run` runs those not
yet scored and prints the report: running it again resumes. `grade` grades a predictions file without a campaign
file. The other commands read what a campaign stored, under DAGSTER_HOME (default {DEFAULT_DAGSTER_HOME}).
`eval-pipeline COMMAND --help` describes a command; docs/OPERATIONS.md details them all."""

# Each command's examples (`--help` shows them under its flags), and the whole command's under None.
EXAMPLES: dict[str | None, tuple[tuple[str, str], ...]] = {
    None: (
        ("eval-pipeline run", "run the built-in demo campaign on this machine, or resume it"),
        ("eval-pipeline view", "browse its trials at http://127.0.0.1:8765/"),
        ("eval-pipeline grade --predictions preds.jsonl --dataset demo --backend local", "grade a predictions file"),
    ),
    "run": (
        ("eval-pipeline run", "the demo campaign (local backend, no network); run it again to resume"),
        (
            "eval-pipeline run --campaign my_campaign.yaml --limit 1",
            "one trial as a smoke test: the first of the campaign's first slice",
        ),
        ("eval-pipeline run --instance hello-file --variant oracle --json", "two trials; the summary as JSON"),
        (
            "eval-pipeline run --dataset demo --agent oracle --backend local",
            "an agent on a dataset, without a campaign file",
        ),
    ),
    "validate": (
        ("eval-pipeline validate --campaign my_campaign.yaml", "every instance, each patch graded 3 times"),
        ("eval-pipeline validate --instance hello-file --repeats 1", "one instance, graded once"),
    ),
    "calibrate": (("eval-pipeline calibrate --multipliers 1,2,uncapped", "the demo at 1x, 2x and no resource caps"),),
    "grade": (
        ("eval-pipeline grade --predictions preds.jsonl --dataset demo --backend local", "on the demo's issues"),
        (
            "eval-pipeline grade --predictions preds.json --dataset hf:princeton-nlp/SWE-bench_Verified@REVISION:test",
            "on SWE-bench Verified at a pinned revision, in containers",
        ),
    ),
    "export": (("eval-pipeline export --campaign my_campaign.yaml --variant gpt --to out/", "one variant's trials"),),
    "view": (
        ("eval-pipeline view", "the demo's trials at http://127.0.0.1:8765/"),
        ("eval-pipeline view --campaign my_campaign.yaml --port 0", "on any free port"),
    ),
    "report": (
        ("eval-pipeline report", "the demo's report.html again, with its failed trials' trajectories"),
        ("eval-pipeline report --trial 'hello-file|oracle-s0'", "with that trial's trajectory"),
    ),
    "janitor": (
        ("eval-pipeline janitor --campaign demo_containers", "the containers a campaign left behind"),
        ("eval-pipeline janitor --kubernetes --older-than-hours 24", "pods older than a day, and finished ones"),
    ),
    "gate": (
        ("eval-pipeline gate --campaign demo --environment prod", "exit 1 when the demo's report fails its prod gate"),
        ("eval-pipeline gate --policy gates/prod.yaml --report report.json", "any policy on any report"),
    ),
    "instance-config": (
        (
            "EVAL_PIPELINE_POSTGRES_URL=postgresql://host/db eval-pipeline instance-config",
            "the dagster.yaml for storage in PostgreSQL",
        ),
    ),
}


def _examples(command: str | None) -> str:
    """A --help's closing section: the command's examples, each with what it does."""
    return "examples:\n" + "\n".join(f"  {line}\n      {what}" for line, what in EXAMPLES[command])


def _describe(commands: Any) -> None:
    """Each command's --help: its one-line help as its description, and its examples after its flags."""
    for action in commands._choices_actions:  # argparse keeps each command's help only there
        command = commands.choices[action.dest]
        command.description = f"{action.help[0].upper()}{action.help[1:]}."
        command.epilog = _examples(action.dest)
        command.formatter_class = argparse.RawDescriptionHelpFormatter


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
            "--limit", type=int, metavar="N", help="the first N selected trials, slices as the campaign lists them"
        )


def _selection(args: argparse.Namespace) -> "TrialSelection":
    from eval_pipeline.trial.selection import TrialSelection

    limit = getattr(args, "limit", None)  # a command with a --limit of its own (report) has no selection limit
    return TrialSelection(tuple(args.instance), tuple(args.variant), tuple(args.slice), tuple(args.seed), limit)


def _add_campaign_commands(commands: Any) -> None:
    """run, validate and calibrate: the commands that run trials through Dagster."""
    run = _command(
        commands,
        "run",
        "run or resume a campaign in process; or, with --dataset and --agent, an agent on a dataset without a"
        " campaign file",
        _run_command,
    )
    run.set_defaults(campaign=None)  # demo, unless --dataset names what to run
    run.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    _workers(run, "trial runs in parallel processes (default: cores, at most 4)")
    _selection_flags(run)
    one_line = run.add_argument_group(
        "an agent on a dataset, without a campaign file (a campaign is written under the run id and printed)"
    )
    one_line.add_argument(
        "--dataset",
        help="demo, hf:<name>@<revision>[:<split>], a file or folder of SWE-bench rows, or a Harbor task directory"
        " or a folder of them",
    )
    one_line.add_argument("--agent", help="the agent's name (oracle, null, llm, mini-swe-agent, ...)")
    one_line.add_argument("--model", help="the agent's model parameter")
    one_line.add_argument("--seeds", type=int, help="trials per instance (default 1)")
    one_line.add_argument(
        "--backend",
        choices=["container", "kubernetes", "local"],
        help="the sandbox (default container; local lets the agent run there, with the local backend's walls)",
    )
    one_line.add_argument(
        "--mirror-dir", metavar="DIR", help="clone the rows' repositories from the mirrors in DIR, not from GitHub"
    )
    one_line.add_argument("--run-id", help="the run's name (default: the agent, the model and a hash of the campaign)")
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
        "--dataset",
        default="demo",
        help="demo (the default), hf:<name>@<revision>[:<split>], or a file or folder of SWE-bench rows",
    )
    grade.add_argument(
        "--mirror-dir", metavar="DIR", help="clone the rows' repositories from the mirrors in DIR, not from GitHub"
    )
    grade.add_argument(
        "--images",
        choices=["build", "pull", "auto"],
        default="build",
        help="run SWE-bench rows in the instance images SWE-bench names (pull), where they are named (auto), or"
        " build every environment here (build, the default); see docs/DATASETS.md",
    )
    grade.add_argument(
        "--namespace", help="the instance images' namespace, as SWE-bench's --namespace (default swebench)"
    )
    grade.add_argument("--instance-image-tag", metavar="TAG", help="the instance images' tag (default latest)")
    grade.add_argument(
        "--backend",
        choices=["container", "kubernetes", "local"],
        default="container",
        help="the sandbox (default container)",
    )
    grade.add_argument(
        "--run-id",
        metavar="ID",
        help="name this grading (its campaign is grade_<ID>); default: the file's name and a hash of its content"
        " and the dataset, so the same file graded again resumes and another file never shares its campaign",
    )
    grade.add_argument(
        "--ignore-unknown-ids",
        action="store_true",
        help="grade the predictions for the dataset's instances and warn of the others (default: refuse the file)",
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
    parser = argparse.ArgumentParser(
        prog="eval-pipeline",
        description=DESCRIPTION,
        epilog=_examples(None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"eval-pipeline {HARNESS_VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_campaign_commands(commands)
    _add_grade_command(commands)
    _add_reading_commands(commands)
    _add_operations_commands(commands)
    _describe(commands)
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
    except EngineUnreachable as error:
        print(f"eval-pipeline {args.command}: {error}{_without_engine(args)}", file=sys.stderr)
        return 1
    except (CampaignRunError, LaunchError) as error:
        print(f"eval-pipeline {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        resume = "; what finished is kept. Run the same command again to resume" if args.command in RESUMABLE else ""
        print(f"eval-pipeline {args.command}: interrupted{resume}.", file=sys.stderr)
        return 130


# The commands that run trials: an interrupted one keeps what finished, and running it again resumes it.
RESUMABLE = frozenset({"run", "grade", "validate", "calibrate"})


def _without_engine(args: argparse.Namespace) -> str:
    """How to go on without a container engine: the local backend (no walls, so trusted agents only), chosen by
    --backend where the command runs a dataset (grade, run --dataset), else in the campaign file."""
    if getattr(args, "dataset", None):
        return "; or, without a container engine, --backend local runs on this machine, without isolation"
    return (
        "; or, without a container engine, a campaign with `sandbox: {backend: local}` runs on this machine,"
        " without isolation"
    )


def console_main() -> None:
    """The `eval-pipeline` command: `main`, then an exit that skips the interpreter's teardown. Freeing each of
    the thousands of modules and objects that Dagster brings, one by one, takes about 0.9 s after the work is
    done, and changes nothing. The exit is an exit handler registered after `logging`'s (this module imports it
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
