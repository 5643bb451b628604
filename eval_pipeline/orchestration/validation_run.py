"""`eval-pipeline validate`: the dataset prepared, one validation run per instance, then the validation report."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.config.quarantine import read_validation
from eval_pipeline.datasets.sources import load_portfolio
from eval_pipeline.defs.progress import CampaignProgress, Cycle
from eval_pipeline.defs.stages import VALIDATION_REPORT_STAGE, VALIDATION_STAGE
from eval_pipeline.orchestration.driver import FinishedRun, failure_message, run_all, run_one
from eval_pipeline.orchestration.errors import CampaignRunError
from eval_pipeline.orchestration.launchers import Launcher
from eval_pipeline.trial.harness import Harness
from eval_pipeline.trial.selection import EVERY_TRIAL, TrialSelection
from eval_pipeline.trial.validation import VALIDATION_FILE


class DatasetNotLoaded(CampaignRunError):
    """The campaign's dataset could not be loaded, so there was nothing to validate."""


def run_validation(
    campaign: Campaign,
    dagster_instance: DagsterInstance,
    launcher: Launcher,
    cycle: Cycle,
    paths: Paths,
    repeats: int,
    print_line: Callable[[str], None] = lambda _: None,
    selection: TrialSelection = EVERY_TRIAL,
) -> dict[str, Any]:
    """Validate every instance of the campaign (or the `selection`'s) and return the validation report; for a
    selection, only the selected instances' results (`{"campaign", "selected"}`): the report, and the quarantine
    it decides, are made only from every instance's validation. Raises DatasetNotLoaded when the dataset cannot
    be loaded, CampaignRunError when the report cannot be made."""
    prepared = run_one(dagster_instance, launcher, cycle.request("prepare"))
    if prepared.status != DagsterRunStatus.SUCCESS:
        raise DatasetNotLoaded(
            str(failure_message(dagster_instance, prepared, f"campaign {campaign.name}: preparing the dataset"))
        )
    instances = _selected(CampaignProgress.read(dagster_instance, campaign).instances, campaign, paths, selection)
    run_config = {"ops": {f"{campaign.name}__validation": {"config": {"repeats": repeats}}}}
    finished_count, selected = 0, {}

    def print_finished(finished: FinishedRun) -> None:
        nonlocal finished_count
        finished_count += 1
        if finished.success:
            result = selected[finished.partition] = finished.metadata[("validation", finished.partition)]
            ended = f"{result['status']} (gold {result['gold_resolved']}, empty {result['empty_resolved']})"
        else:
            ended = f"failed: {finished.failure}"
        print_line(f"[{finished_count}/{len(instances)}] {finished.partition}: {ended}")

    try:
        requests = [cycle.request(VALIDATION_STAGE, instance_id) for instance_id in instances]
        run_all(dagster_instance, launcher, requests, print_finished, run_config)
    finally:  # pods are restarted on demand by the next run
        Harness.from_env(paths).sandbox(campaign).release()
    if not selection.everything:
        return {"campaign": campaign.name, "selected": {i: _result(selected.get(i)) for i in instances}}
    reported = run_one(dagster_instance, launcher, cycle.request(VALIDATION_REPORT_STAGE))
    if reported.status != DagsterRunStatus.SUCCESS:
        raise failure_message(dagster_instance, reported, f"campaign {campaign.name}: the validation report")
    return read_validation(paths.reports / campaign.name / VALIDATION_FILE)


def _selected(instances: Sequence[str], campaign: Campaign, paths: Paths, selection: TrialSelection) -> list[str]:
    """The registered instances the selection picks (by instance id and slice), all of them for no selection."""
    if selection.everything:
        return list(instances)
    portfolio = load_portfolio(campaign.slices, paths).excluding(campaign.exclude)
    chosen = set(
        selection.pick_instances({t.instance_id: portfolio.slice_of(t.instance_id) for t in portfolio.instances})
    )
    return [i for i in instances if i in chosen]


def _result(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A selected instance's validation as its run recorded it; `failed` when its run failed."""
    if metadata is None:
        return {"status": "failed", "detail": "its validation run failed (see the line above)"}
    fields = ("status", "slice", "gold_resolved", "empty_resolved", "detail")
    return {field: metadata[field] for field in fields}
