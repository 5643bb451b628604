"""A small campaign of demo trials, planned and run on the local sandbox: its `portfolio` and `identities`
fixtures serve tests in several directories (listed in the root conftest's `pytest_plugins`)."""

import pytest

from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR, load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.spec import trial_specs

CAMPAIGN_FIELDS = {
    "name": "ids",
    "benchmark": {"kind": "demo"},
    "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "none", "agent": "null"}],
    "seeds": 2,
}

CAMPAIGN = parse_campaign(CAMPAIGN_FIELDS, "test")


@pytest.fixture(scope="module")
def portfolio(demo_benchmark, tmp_path_factory) -> Portfolio:
    terminal = load_terminal_tasks(DEMO_TASKS_DIR, tmp_path_factory.mktemp("task_mirrors"))
    return Portfolio({"code-issues": demo_benchmark, "terminal": terminal})


@pytest.fixture
def identities(portfolio, shared_sandbox):
    return trial_specs(CAMPAIGN, portfolio, lambda task: shared_sandbox)


def run_trial(identity, portfolio, sandbox, store):
    """Generate and evaluate one trial as the campaign's assets do."""
    task = portfolio.instance(identity.instance_id)
    spec = portfolio.environment_for(task)
    environment = sandbox.prepare(task, spec, portfolio.source_for(task))
    agent = CAMPAIGN.trial(identity.trial).variant.make_agent()
    generation = generate(task, agent, identity.seed, environment, sandbox, store, CAMPAIGN.timeout_multiplier)
    return generation, evaluate(task, spec, generation, environment, sandbox, store, CAMPAIGN.test_timeout_for(task))


def first_code_issue(identities):
    """The first trial of a code issue: quicker to run than a terminal task."""
    return next(i for i in identities if i.slice == "code-issues")
