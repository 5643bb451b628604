import pytest

from eval_pipeline.benchmark import Instance
from eval_pipeline.campaign import CampaignError, builtin_campaigns, load_campaign, parse_campaign
from eval_pipeline.dataset_sources import DatasetSourceError, load_portfolio
from eval_pipeline.settings import Paths
from eval_pipeline.terminal_tasks import DEMO_TASKS_DIR
from eval_pipeline_tests.test_benchmark import row

MINIMAL = {"name": "mine", "benchmark": {"kind": "demo"}, "variants": [{"name": "o", "agent": "oracle"}]}


def test_builtin_demo_campaign():
    assert "demo" in builtin_campaigns()
    campaign = load_campaign("demo")
    assert {v.name for v in campaign.variants} == {"oracle", "null", "flaky"}
    assert [t.key for t in campaign.trials][:2] == ["oracle-s0", "oracle-s1"]
    assert campaign.resources.memory_floor_mb < campaign.resources.memory_ceiling_mb
    assert list(campaign.slices) == ["code-issues", "terminal"]
    assert campaign.slices["terminal"]["path"] == str(DEMO_TASKS_DIR), "relative to the built-in campaign file"
    assert campaign.baseline == "null"
    assert [(gate.environment, gate.candidate) for gate in campaign.gates] == [("staging", "flaky"), ("prod", "flaky")]


def test_the_baseline_is_a_named_variant_or_the_first():
    two = {**MINIMAL, "variants": [{"name": "o", "agent": "oracle"}, {"name": "n", "agent": "null"}]}
    assert parse_campaign({**two, "baseline": "n"}, "x").baseline == "n"
    assert parse_campaign(two, "x").baseline == "o"


def test_gate_policies_are_checked_against_the_variants(tmp_path):
    (tmp_path / "prod.yaml").write_text("environment: prod\ncandidate: gpt\n")
    with pytest.raises(CampaignError, match="my.yaml: field gates: prod.yaml: candidate 'gpt' is not a variant"):
        parse_campaign({**MINIMAL, "gates": ["prod.yaml"]}, "my.yaml", base_dir=tmp_path)
    with pytest.raises(CampaignError, match="my.yaml: field gates: .*missing.yaml: cannot be read"):
        parse_campaign({**MINIMAL, "gates": ["missing.yaml"]}, "my.yaml", base_dir=tmp_path)


def test_a_single_benchmark_is_the_default_slice_and_slices_name_a_portfolio():
    assert parse_campaign(MINIMAL, "x").slices == {"default": {"kind": "demo"}}
    portfolio = {k: v for k, v in MINIMAL.items() if k != "benchmark"} | {
        "slices": {"code-issues": {"kind": "demo"}, "terminal": {"kind": "terminal", "path": "tasks"}}
    }
    campaign = parse_campaign(portfolio, "x", base_dir=DEMO_TASKS_DIR.parent)
    assert campaign.slices["terminal"]["path"] == str(DEMO_TASKS_DIR.parent / "tasks")


def test_task_resources_and_timeouts_come_from_the_task_where_it_sets_them(tmp_path):
    campaign = parse_campaign(MINIMAL | {"timeouts": {"tests_s": 100, "multiplier": 2}}, "x")
    portfolio = load_portfolio({"terminal": {"kind": "terminal", "path": str(DEMO_TASKS_DIR)}}, Paths(tmp_path))
    task = portfolio.instance("build-index")
    limits = campaign.limits_for(task)
    assert (limits.memory_ceiling_mb, limits.memory_floor_mb, limits.cpu_ceiling) == (256, 256, 1.0)
    code_task = Instance.from_row(row())  # brings no resources or timeouts of its own: the campaign's apply
    assert campaign.test_timeout_for(task) == 60.0 and campaign.test_timeout_for(code_task) == 200.0
    assert campaign.limits_for(code_task) == campaign.resources


def test_an_instance_id_in_two_slices_is_rejected_naming_both(tmp_path):
    source = {"kind": "terminal", "path": str(DEMO_TASKS_DIR)}
    with pytest.raises(DatasetSourceError, match="instance 'build-index' is in slices 'first' and 'second'"):
        load_portfolio({"first": source, "second": source}, Paths(tmp_path))
    with pytest.raises(DatasetSourceError, match="slice 'broken': benchmark.path: .* is not a directory"):
        load_portfolio({"broken": {"kind": "terminal", "path": str(tmp_path / "none")}}, Paths(tmp_path))


def test_seeds_as_count_or_list():
    assert parse_campaign({**MINIMAL, "seeds": 3}, "x").seeds == (0, 1, 2)
    assert parse_campaign({**MINIMAL, "seeds": [5, 9]}, "x").seeds == (5, 9)


def test_plan_version_follows_the_plan():
    base = parse_campaign(MINIMAL, "x")
    assert base.plan_version == parse_campaign(dict(MINIMAL), "y").plan_version
    assert base.plan_version != parse_campaign({**MINIMAL, "seeds": 2}, "x").plan_version


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seeds": 0}, "field seeds"),
        ({"name": "has space"}, "field name"),
        ({"variants": [{"name": "o", "agent": "gpt-99"}]}, r"variants\[0\] \(o\): field agent/params: unknown agent"),
        ({"variants": [{"name": "f", "agent": "flaky", "params": {"p": 2}}]}, "p must be in"),
        ({"variants": [{"name": "o", "agent": "oracle"}, {"name": "o", "agent": "null"}]}, "duplicate variant"),
        ({"resources": {"memory_floor_mb": 4096, "memory_ceiling_mb": 1024}}, "floor is above its ceiling"),
        ({"resources": {"gpus": 1}}, "unknown field"),
        ({"typo": 1}, "unknown field"),
        ({"sandbox": {"backend": "vmware"}}, "field sandbox.backend: unknown backend 'vmware'"),
        ({"slices": {"a": {"kind": "demo"}}}, "either benchmark .* or slices"),
        ({"timeouts": {"multiplier": 0}}, "field timeouts.multiplier: expected a positive number"),
        ({"baseline": "gpt"}, "field baseline: 'gpt' is not a variant"),
    ],
)
def test_bad_campaigns_name_the_file_and_field(change, message):
    with pytest.raises(CampaignError, match=r"my\.yaml: .*" + message):
        parse_campaign({**MINIMAL, **change}, "my.yaml")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(CampaignError, match="no such file"):
        load_campaign(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(CampaignError, match="bad.yaml: not valid YAML"):
        load_campaign(str(bad))


def test_slice_names_and_sources_are_checked():
    base = {k: v for k, v in MINIMAL.items() if k != "benchmark"}
    with pytest.raises(CampaignError, match="my.yaml: field slices: 'has space' must be"):
        parse_campaign(base | {"slices": {"has space": {"kind": "demo"}}}, "my.yaml")
    with pytest.raises(CampaignError, match="my.yaml: field slices.code: expected a dataset source"):
        parse_campaign(base | {"slices": {"code": "demo"}}, "my.yaml")
