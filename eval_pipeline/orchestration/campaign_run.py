"""`eval-pipeline run`: one cycle over a campaign, a line printed per finished run, summed up at the end.

Resuming is the default: a cycle requests only environments not materialized
and trials not yet evaluated, and a re-run of a finished step costs a lookup in
the artifact store, not a regeneration.
"""

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

from eval_pipeline.common.foreign_text import shown
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths, dagster_home
from eval_pipeline.common.text import counted
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.sources import load_portfolio
from eval_pipeline.defs.group import ENVIRONMENT_POOL, MODEL_API_POOL
from eval_pipeline.defs.partitions import trial_partition, trial_run_key
from eval_pipeline.defs.progress import REQUEST_TAG, CampaignProgress, Cycle, HarnessView
from eval_pipeline.orchestration.driver import (
    FinishedRun,
    Materialized,
    drive,
    failure_message,
    run_one,
)
from eval_pipeline.orchestration.errors import CampaignRunError
from eval_pipeline.orchestration.launchers import Launcher, free_abandoned_slots
from eval_pipeline.orchestration.tally import Tally
from eval_pipeline.results.model import Report, load_report
from eval_pipeline.results.warehouse import read_attempts_table, read_results_table
from eval_pipeline.trial.harness import Harness
from eval_pipeline.trial.pending import pending_trials
from eval_pipeline.trial.records import AttemptRecord, ResultRow
from eval_pipeline.trial.selection import EVERY_TRIAL, TrialSelection
from eval_pipeline.trial.spec import TrialSpec, trial_specs


@dataclass
class StageCounts:
    """How many steps computed, reused a stored artifact, or failed."""

    computed: int = 0
    reused: int = 0
    failed: int = 0

    def add(self, reused: bool | None) -> None:
        name = "failed" if reused is None else "reused" if reused else "computed"
        setattr(self, name, getattr(self, name) + 1)


@dataclass
class CampaignRun:
    report: Report | None = None
    environments_prepared: int = 0
    environments_failed: dict[str, str] = field(default_factory=dict)  # instance -> why its environment failed
    generation: StageCounts = field(default_factory=StageCounts)
    evaluation: StageCounts = field(default_factory=StageCounts)
    selected: bool = False  # the run was over a selection of the campaign's trials (filters, --limit)
    trials: list[ResultRow] = field(default_factory=list)  # the results of the trials it was over
    agent_errors: dict[str, str] = field(default_factory=dict)  # "<instance> <trial>" -> the agent's error, on one line

    @property
    def final_report(self) -> Report:
        """The report `run_campaign` reads as the run ends: every run it returns holds one."""
        if self.report is None:
            raise CampaignRunError("a campaign run without its report: run_campaign reads it as the run ends")
        return self.report

    def failures(self) -> list[str]:
        """Why the run counts as failed, one line each, or [] when it does not: nothing it was over could be
        scored (for a selection, with the outcomes they ended in), or every environment it tried to prepare failed
        (a line per environment, with its log)."""
        lines = []
        if self.environments_failed and not self.environments_prepared:
            lines += [f"environment failed: {i}: {_last_error(why)}" for i, why in self.environments_failed.items()]
        if self.trials and not any(row.scored for row in self.trials):
            if self.selected:
                outcomes = Counter(row.outcome for row in self.trials)
                ended = ", ".join(f"{outcome} {count}" for outcome, count in sorted(outcomes.items()))
                lines.append(f"none of the {len(self.trials)} selected trials could be scored ({ended})")
            else:
                lines.append(f"none of the {len(self.trials)} planned trials could be scored")
        return lines

    def agent_error_lines(self) -> list[str]:
        """A line for each trial this run ended in agent_error, with the agent's error as its evaluation recorded
        it: at most AGENT_ERRORS_TOLD of them, then how many more."""
        lines = [f"agent_error: {trial}: {error}" for trial, error in self.agent_errors.items()]
        if len(lines) <= AGENT_ERRORS_TOLD:
            return lines
        more = len(lines) - AGENT_ERRORS_TOLD
        return [*lines[:AGENT_ERRORS_TOLD], f"agent_error: {more} more (eval-pipeline view or export shows each)"]

    def as_json(self) -> dict[str, Any]:
        """The report's summary (Report.summary: numbers, gates' verdicts, files), this run's step counts, and the
        agent's error of each trial it ended in agent_error."""
        return {
            **self.final_report.summary(),
            "environments_prepared": self.environments_prepared,
            "generation": vars(self.generation),
            "evaluation": vars(self.evaluation),
            "agent_errors": self.agent_errors,
        }


AGENT_ERRORS_TOLD = 10  # a campaign of a failing agent says why for this many trials; the rest are in view/export


def _one_line(text: str, limit: int = 300) -> str:
    """An agent's error on one line as a terminal may show it: its start and its end when it is longer than
    `limit` (an error's start says what failed, a traceback's end why)."""
    flat = " ".join(shown(text).split())
    return flat if len(flat) <= limit else f"{flat[: limit // 2]} … {flat[-(limit // 2) :]}"


def create_pools(dagster_instance: DagsterInstance) -> None:
    """Create the pools' default limits once, before parallel runs race to, and free the slots of runs that
    no longer run.

    On PostgreSQL two runs creating the same pool at once fail one of them: Dagster's storage
    retries a failed insert as an update inside the transaction the failure aborted.
    A pool that exists (with its default or a limit an operator set) is left as it is.
    """
    existing = dagster_instance.event_log_storage.get_concurrency_keys()
    for pool in (ENVIRONMENT_POOL, MODEL_API_POOL):
        if pool not in existing:
            dagster_instance.event_log_storage.initialize_concurrency_limit_to_default(pool)
    free_abandoned_slots(dagster_instance)


Show = Callable[[Callable[[], str]], None]  # hands a live line the tally's line, to render when it redraws


class _ProgressReporter:
    """Counts what each trial and run did and prints a line for it: a trial as soon as its evaluation is
    materialized, one that ended unscored (or whose run ended before its evaluation was seen) when its run has
    finished. With `show` (a terminal's live line) the tally is handed to it at once, to render whenever it
    redraws, and again as each trial ends, and only unscored trials get a line; without, every trial's line
    ends with the tally."""

    def __init__(self, run: CampaignRun, tally: Tally, print_line: Callable[[str], None], show: Show | None) -> None:
        self.run, self.tally, self.print_line, self.show = run, tally, print_line, show
        if show is not None:
            show(tally.line)
        self.reported: set[str] = set()
        self.generations: dict[str, Mapping[str, Any]] = {}  # partition -> its materialized generation's metadata

    def materialized(self, metadata: Materialized) -> None:
        for (asset, partition), values in metadata.items():
            if asset == "generation":
                self.generations[partition] = values
        for (asset, partition), values in metadata.items():
            if asset == "evaluation":
                generation = self.generations.get(partition, {})
                self._report_trial(partition, values["outcome"], generation.get("reused"), values["reused"])

    def __call__(self, finished: FinishedRun) -> None:
        if finished.stage == "environments":
            if finished.success:
                self.run.environments_prepared += 1
                self.print_line(f"environment ready: {finished.partition}")
            else:
                self.run.environments_failed[finished.partition] = finished.reasons or finished.failure
                self.print_line(f"environment failed: {finished.partition}: {finished.failure}; its trials are skipped")
        elif finished.stage == "trials":
            partitions = finished.trial_partitions()
            if not partitions:  # the run ended before any of its trials did (a crash, a cancel)
                self.print_line(f"trials {finished.partition}: {finished.failure}")
            for partition in partitions:
                if generation := finished.metadata.get(("generation", partition)):
                    self.generations.setdefault(partition, generation)
                if partition in finished.outcomes:
                    outcome = f"{finished.outcomes[partition].value} (run {finished.run.run_id})"
                else:
                    outcome = finished.metadata[("evaluation", partition)]["outcome"]
                reused = (finished.reused(name, partition) for name in ("generation", "evaluation"))
                self._report_trial(partition, outcome, *reused)

    def _report_trial(self, partition: str, outcome: str, generation: bool | None, evaluation: bool | None) -> None:
        if partition in self.reported:
            return
        self.reported.add(partition)
        self.run.generation.add(generation)
        self.run.evaluation.add(evaluation)
        self.tally.add(outcome, self.generations.get(partition))
        instance_id, trial = partition.split("|", 1)
        steps = f"generation {_status(generation)}, evaluation {_status(evaluation)}"
        line = f"[{len(self.reported)}/{self.tally.total}] {instance_id} {trial}: {outcome} ({steps})"
        if self.show is None:
            self.print_line(f"{line} · {self.tally.line()}")
            return
        if not Outcome(outcome.split(" ", 1)[0]).is_scored:
            self.print_line(line)
        self.show(self.tally.line)


def _last_error(failure: str) -> str:
    """A build failure's last non-empty line of output, and its log's path where the message names one."""
    text, _, log = failure.rpartition("; log: ")
    lines = [line.strip() for line in (text or failure).splitlines() if line.strip()]
    last = lines[-1] if lines else failure
    return f"{last[-300:]} (log: {log.strip()})" if text else last[-300:]


def _status(reused: bool | None) -> str:
    """How a step ended: computed, reused from the store, or not stored (its outcome is not scored)."""
    return "not stored" if reused is None else "reused" if reused else "computed"


def harness_view(specs: list[TrialSpec], harness: Harness) -> HarnessView:
    """What the store holds and which environments the trials' keys name. Trial partitions with no intact scored
    evaluation in the artifact store (the pending scan: a listing per storage prefix and one read per finished
    trial): Dagster's record of a partition is trusted only when the store still holds what it recorded intact,
    and a trial whose evaluation was lost, truncated or forged runs again, reusing its patch. Each instance's
    environment key: one Dagster recorded under another key is prepared again."""
    return HarnessView(
        unstored={trial_partition(spec) for spec in pending_trials(specs, harness.store, verify=True)},
        environment_keys={spec.instance_id: spec.environment_key for spec in specs},
    )


def run_campaign(
    campaign: Campaign,
    dagster_instance: DagsterInstance,
    launcher: Launcher,
    cycle: Cycle,
    paths: Paths,
    print_line: Callable[[str], None] = lambda _: None,
    selection: TrialSelection = EVERY_TRIAL,
    show: Show | None = None,
) -> CampaignRun:
    """Prepare the dataset, then carry the cycle through (over the trials `selection` picks; the results and
    the report are the whole campaign's), printing a line for each step with `print_line` and handing the
    tally to `show` when given (a terminal's live line: see _ProgressReporter); raises CampaignRunError when a
    stage every trial needs (preparing, results) fails, and SelectionError when the selection names what the
    campaign does not have."""
    create_pools(dagster_instance)
    harness = Harness.from_env(paths)
    # The engine is asked (a quarter second) while the dataset is prepared; a failed preparation does not wait.
    shared_disks = _on_daemon_thread(harness.sandbox(campaign).disks_shared_with, harness_storage(paths))
    prepared = run_one(dagster_instance, launcher, cycle.request("prepare"))
    if prepared.status != DagsterRunStatus.SUCCESS:
        raise failure_message(dagster_instance, prepared, f"campaign {campaign.name}: preparing the dataset")
    for shared in shared_disks.result():
        print_line(f"{campaign.name}: warning: {shared}")
    portfolio = load_portfolio(campaign.slices, harness.paths).excluding(campaign.exclude)
    specs = trial_specs(campaign, portfolio, harness.sandbox_for(campaign))
    if not selection.everything:
        cycle = replace(cycle, only=frozenset(map(trial_partition, selection.pick(specs))))
    view = harness_view(specs, harness)
    progress = CampaignProgress.read(dagster_instance, campaign, view, cycle.only)
    pending = progress.pending_trials()
    planned = len(progress.instances) * len(progress.trials) if cycle.only is None else len(cycle.only)
    print_line(
        f"{campaign.name}: {counted(len(progress.instances), 'instance')} x {counted(len(progress.trials), 'trial')}"
        f"{'' if cycle.only is None else f' (selected: {len(cycle.only)})'};"
        f" {planned - len(pending)} of {planned} trials already done; running {len(pending)},"
        f" {launcher.capacity} at a time"
    )
    run = CampaignRun()
    try:
        reporter = _ProgressReporter(run, Tally(len(pending)), print_line, show)
        drive(dagster_instance, cycle, launcher, reporter, view, reporter.materialized)
    finally:  # pods are restarted on demand by the next run
        harness.sandbox(campaign).release()
    results = _latest(dagster_instance, cycle, "results")
    if results is None:
        raise CampaignRunError(f"campaign {campaign.name}: no results were built (see the runs of cycle {cycle.id})")
    if results.status != DagsterRunStatus.SUCCESS:
        raise failure_message(dagster_instance, results, f"campaign {campaign.name}: building results")
    run.report = load_report(harness.fetch(paths.reports / campaign.name / "report.json"))
    _read_trials(run, harness.fetch(paths.results / f"{campaign.name}.duckdb"), cycle.only, reporter.reported)
    return run


def _read_trials(run: CampaignRun, results: Path, only: frozenset[str] | None, ended: set[str]) -> None:
    """The run's trials from the results (those of `only`, or the campaign's), and the agent's error of each trial
    `ended` by this run whose final evaluation is agent_error."""

    def partition(record: ResultRow | AttemptRecord) -> str:
        return str(trial_run_key(record.instance_id, record.trial))

    run.selected = only is not None
    run.trials = [row for row in read_results_table(results) if only is None or partition(row) in only]
    run.agent_errors = {
        f"{attempt.instance_id} {attempt.trial}": _one_line(attempt.detail)
        for attempt in read_attempts_table(results)
        if (attempt.stage, attempt.final, attempt.outcome) == ("evaluation", True, Outcome.AGENT_ERROR)
        and partition(attempt) in ended
    }


def _on_daemon_thread(call: Callable[..., Any], *args: Any) -> Future:
    """`call(*args)` on a daemon thread: an engine that does not answer never holds the command at its exit."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call(*args))
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for the result
            future.set_exception(error)

    threading.Thread(target=run, name="on-daemon-thread", daemon=True).start()
    return future


def harness_storage(paths: Paths) -> dict[str, Path]:
    """Where the harness itself writes on this machine, by the name a warning gives it."""
    return {"the data directory": paths.data_dir, "DAGSTER_HOME": dagster_home()}


def _latest(dagster_instance: DagsterInstance, cycle: Cycle, stage: str) -> DagsterRun | None:
    """The cycle's latest run of a stage (the first of the Dagster instance's newest-first list)."""
    key = cycle.request(stage).tags[REQUEST_TAG]
    return next((run for run in cycle.runs(dagster_instance) if run.tags.get(REQUEST_TAG) == key), None)
