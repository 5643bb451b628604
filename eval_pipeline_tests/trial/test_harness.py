"""The harness: one artifact store and one sandbox per campaign and resources, built once per process."""

from dataclasses import replace

from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.datasets.sources import load_portfolio
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.trial.harness import harness_at


def test_one_sandbox_serves_every_task_under_the_same_resources_and_the_resource_wraps_the_same_harness(tmp_path):
    campaign = load_campaign("demo")
    harness = harness_at(str(tmp_path))
    portfolio = load_portfolio(campaign.slices, harness.paths)
    tasks = portfolio.instances
    same = [task for task in tasks if campaign.limits_for(task) == campaign.limits_for(None)]
    own = [task for task in tasks if campaign.limits_for(task) != campaign.limits_for(None)]
    assert same and own, "the demo has tasks under the campaign's resources and a task with its own"
    assert {id(harness.sandbox(campaign, task)) for task in same} == {id(harness.sandbox(campaign))}
    assert harness.sandbox(campaign, own[0]) is not harness.sandbox(campaign)
    assert harness.sandbox(campaign, own[0]).limits == campaign.limits_for(own[0])
    other = replace(campaign, name="other")
    assert harness.sandbox(other) is not harness.sandbox(campaign), "a campaign's sandboxes are its own"
    assert harness.store is harness.store
    assert EvalPipelineResource(data_dir=str(tmp_path)).harness is harness
    assert harness_at(str(tmp_path / "elsewhere")) is not harness
