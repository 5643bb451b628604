import os
import subprocess
import sys

import pytest
import yaml

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import BUILTIN_DIR, CampaignError, builtin_campaigns, load_campaign, parse_campaign
from eval_pipeline.datasets.config import DemoSource
from eval_pipeline.datasets.sources import DatasetSourceError, load_portfolio
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR
from eval_pipeline.trial.spec import generation_key
from eval_pipeline_tests.support.rows import row

MINIMAL = {"name": "mine", "benchmark": {"kind": "demo"}, "variants": [{"name": "o", "agent": "oracle"}]}


def test_builtin_demo_campaign():
    assert "demo" in builtin_campaigns()
    campaign = load_campaign("demo")
    assert {v.name for v in campaign.variants} == {"oracle", "null", "flaky"}
    assert [t.key for t in campaign.trials][:2] == ["oracle-s0", "oracle-s1"]
    assert campaign.resources.memory_floor_mb < campaign.resources.memory_ceiling_mb
    assert list(campaign.slices) == ["code-issues", "terminal"]
    assert campaign.slices["terminal"].path == str(DEMO_TASKS_DIR.resolve()), "builtin: is eval_pipeline's own"
    assert campaign.baseline == "null"
    assert [(gate.environment, gate.candidate) for gate in campaign.gates] == [("staging", "flaky"), ("prod", "flaky")]


def test_the_baseline_is_a_named_variant_or_the_first():
    two = {**MINIMAL, "variants": [{"name": "o", "agent": "oracle"}, {"name": "n", "agent": "null"}]}
    assert parse_campaign({**two, "baseline": "n"}, "x").baseline == "n"
    assert parse_campaign(two, "x").baseline == "o"


def test_a_variant_opts_into_network_by_name_and_only_its_generations_change_key():
    opened = {
        **MINIMAL,
        "variants": [{"name": "o", "agent": "oracle", "network": True}, {"name": "n", "agent": "null"}],
    }
    campaign = parse_campaign(opened, "x")
    assert campaign.network and [variant.network for variant in campaign.variants] == [True, False]
    assert not parse_campaign(MINIMAL, "x").network, "no network unless a variant asks"
    with pytest.raises(CampaignError, match=r"variants\.0\.network|variants\[0\]\.network"):
        parse_campaign({**MINIMAL, "variants": [{"name": "o", "agent": "oracle", "network": "yes"}]}, "x")
    closed = generation_key("content", {"agent": "oracle"}, 0, None)
    assert closed == generation_key("content", {"agent": "oracle"}, 0, None, network=False)
    assert closed != generation_key("content", {"agent": "oracle"}, 0, None, network=True)


def test_a_patch_made_within_one_kind_of_walls_is_not_reused_within_another(tmp_path):
    """A pod's generation is not a strict container's, nor a local one's: the walls are in the key, and a
    local generation keeps the key it had before."""
    sandboxes = [
        make_sandbox(SandboxSettings.from_mapping(settings), tmp_path, ResourceLimits(), "c")
        for settings in ({"backend": "local"}, {"backend": "container"}, {"backend": "container", "mode": "strict"})
    ]
    assert [sandbox.isolation for sandbox in sandboxes] == ["", "container/pod", "container/strict"]
    keys = [generation_key("content", {"agent": "x"}, 0, None, isolation=s.isolation) for s in sandboxes]
    assert len(set(keys)) == 3 and keys[0] == generation_key("content", {"agent": "x"}, 0, None)


def test_gate_policies_are_checked_against_the_variants(tmp_path):
    (tmp_path / "prod.yaml").write_text("environment: prod\ncandidate: gpt\n")
    with pytest.raises(
        CampaignError, match=r"my.yaml: field gates\[0\]: .*prod.yaml: candidate 'gpt' is not a variant"
    ):
        parse_campaign({**MINIMAL, "gates": ["prod.yaml"]}, "my.yaml", base_dir=tmp_path)
    with pytest.raises(CampaignError, match=rf"my.yaml: field gates\[0\]: {tmp_path}/missing.yaml does not exist"):
        parse_campaign({**MINIMAL, "gates": ["missing.yaml"]}, "my.yaml", base_dir=tmp_path)


def test_a_single_benchmark_is_the_default_slice_and_slices_name_a_portfolio():
    assert parse_campaign(MINIMAL, "x").slices == {"default": DemoSource(kind="demo")}
    portfolio = {k: v for k, v in MINIMAL.items() if k != "benchmark"} | {
        "slices": {"code-issues": {"kind": "demo"}, "terminal": {"kind": "terminal", "path": "demo_tasks"}}
    }
    campaign = parse_campaign(portfolio, "x", base_dir=DEMO_TASKS_DIR.parent)
    assert campaign.slices["terminal"].path == str(DEMO_TASKS_DIR.resolve())


def test_task_resources_and_timeouts_come_from_the_task_where_it_sets_them(tmp_path):
    campaign = parse_campaign(MINIMAL | {"timeouts": {"tests_s": 100, "multiplier": 2}}, "x")
    portfolio = load_portfolio({"terminal": {"kind": "terminal", "path": str(DEMO_TASKS_DIR)}}, Paths(tmp_path))
    task = portfolio.instance("build-index")
    limits = campaign.limits_for(task)
    assert (limits.memory_ceiling_mb, limits.memory_floor_mb, limits.cpu_ceiling) == (256, 256, 1.0)
    code_task = Instance.from_row(row())  # brings no resources or timeouts of its own: the campaign's apply
    assert campaign.test_timeout_for(task) == 240.0 and campaign.test_timeout_for(code_task) == 200.0
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
        (
            {"variants": [{"name": "o", "agent": "gpt-99"}]},
            r"field variants\[0\].agent: unknown agent 'gpt-99' \(known: ",
        ),
        (
            {"variants": [{"name": "f", "agent": "flaky", "params": {"p": 2}}]},
            r"field variants\[0\].params: flaky agent: p must be in",
        ),
        ({"variants": [{"name": "f", "agent": "flaky", "params": {"q": 1}}]}, r"field variants\[0\].params: .*'q'"),
        ({"variants": [{"name": "o", "agent": "oracle"}, {"name": "o", "agent": "null"}]}, "duplicate variant"),
        (
            {"resources": {"memory_floor_mb": 4096, "memory_ceiling_mb": 1024}},
            r"field resources.memory_floor_mb: 4096 is above memory_ceiling_mb \(1024\): a floor is at most",
        ),
        ({"resources": {"gpus": 1}}, "field resources.gpus: unknown field"),
        ({"typo": 1}, "field typo: unknown field"),
        ({"benchmark": {"kind": "demo", "pth": 1}}, "field benchmark.pth: unknown field; allowed: kind, twins$"),
        (
            {"benchmark": {"kind": "nope"}},
            r"field benchmark: unknown kind 'nope' \(known: demo, terminal, swebench, swebench_pro\)",
        ),
        ({"sandbox": {"backend": "vmware"}}, "field sandbox.backend: unknown backend 'vmware'"),
        ({"slices": {"a": {"kind": "demo"}}}, "either benchmark .* or slices"),
        ({"timeouts": {"multiplier": 0}}, "field timeouts.multiplier: expected a number above 0, got 0"),
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
    with pytest.raises(CampaignError, match="bad.yaml: not valid YAML at line 1"):
        load_campaign(str(bad))


def test_slice_names_and_sources_are_checked():
    base = {k: v for k, v in MINIMAL.items() if k != "benchmark"}
    with pytest.raises(CampaignError, match="my.yaml: field slices: 'has space' must be"):
        parse_campaign(base | {"slices": {"has space": {"kind": "demo"}}}, "my.yaml")
    with pytest.raises(
        CampaignError, match=r"my.yaml: field slices.code: expected a mapping with a kind \(demo, terminal"
    ):
        parse_campaign(base | {"slices": {"code": "demo"}}, "my.yaml")


SLICES = {k: v for k, v in MINIMAL.items() if k != "benchmark"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 2}, r"field seed: unknown field \(did you mean 'seeds'\?\); allowed: name, description, "),
        (
            {"slices": {"code": {"kind": "demo", "pth": "x"}}},
            r"field slices.code.pth: unknown field; allowed: kind, twins$",
        ),
        (
            {"slices": {"terminal": {"kind": "terminal", "path": "builtin:demo_tasks", "pth": "x"}}},
            r"field slices.terminal.pth: unknown field \(did you mean 'path'\?\); allowed: kind, path, mirror_dir",
        ),
        (
            {"slices": {"rows": {"kind": "swebench", "hf_name": "x/y", "revision": "abc", "splt": "dev"}}},
            r"field slices.rows.splt: unknown field \(did you mean 'split'\?\)",
        ),
        ({"slices": {"rows": {"kind": "swebench", "hf_name": "x/y"}}}, "field slices.rows.revision: required with hf"),
        ({"slices": {"rows": {"kind": "swebnch"}}}, r"field slices.rows: unknown kind 'swebnch' \(known: demo, "),
        (
            {
                "slices": {
                    "rows": {"kind": "swebench", "path": "builtin:demo_tasks", "environments": {"a/b@1": {"pyton": 3}}}
                }
            },
            r"field slices.rows.environments.a/b@1: unknown field\(s\) \['pyton'\]",
        ),
        (
            {"variants": [{"name": "o", "agnt": "oracle"}]},
            r"field variants\[0\].agnt: unknown field \(did you mean 'agent'",
        ),
        ({"sandbox": {"mdoe": "pod"}}, r"field sandbox.mdoe: unknown field \(did you mean 'mode'\?\)"),
        ({"sandbox": {"mode": "shared"}}, r"field sandbox.mode: Input should be 'pod' or 'strict', got 'shared'"),
        (
            {"resources": {"memory_ceiling": 1}},
            r"field resources.memory_ceiling: unknown field \(did you mean 'memory_",
        ),
        ({"resources": {"pids": True}}, r"field resources.pids: Input should be a valid integer, got True"),
        ({"timeouts": {"test_s": 5}}, r"field timeouts.test_s: unknown field \(did you mean 'tests_s'\?\)"),
        ({"retries": {"max_retry": 5}}, r"field retries.max_retry: unknown field \(did you mean 'max_retries'"),
        ({"nightly": {"cronn": "0 2 * * *"}}, r"field nightly.cronn: unknown field \(did you mean 'cron'\?\)"),
        ({"nightly": {"cron": "daily"}}, r"field nightly.cron: expected five cron fields"),
        ({"exclude": {"instance": ["x"]}}, r"field exclude.instance: unknown field \(did you mean 'instances'\?\)"),
    ],
)
def test_a_typo_in_any_section_fails_at_load_naming_the_field(change, message):
    with pytest.raises(CampaignError, match=r"my\.yaml: " + message):
        parse_campaign({**SLICES, "slices": {"code": {"kind": "demo"}}, **change}, "my.yaml")


def test_every_problem_is_reported_on_its_own_line():
    with pytest.raises(CampaignError) as error:
        parse_campaign({**MINIMAL, "seeds": -1, "sandbox": {"backend": 3}, "retries": {"delay_s": "2"}}, "my.yaml")
    assert str(error.value).splitlines() == [
        "my.yaml: field seeds: expected a positive count or a list of distinct seeds, got -1",
        "my.yaml: field sandbox.backend: Input should be a valid string, got 3",
        "my.yaml: field retries.delay_s: expected a number, got '2'",
    ]


def test_a_copied_demo_campaign_loads_and_plans_the_same_trials(tmp_path):
    copy = tmp_path / "elsewhere" / "mine.yaml"
    copy.parent.mkdir()
    copy.write_text((BUILTIN_DIR / "demo.yaml").read_text())
    copied, builtin = load_campaign(str(copy)), load_campaign("demo")
    assert copied.slices == builtin.slices and copied.gates == builtin.gates
    assert copied.plan_version == builtin.plan_version
    assert [trial.key for trial in copied.trials] == [trial.key for trial in builtin.trials]


def test_a_missing_relative_path_fails_at_load_naming_field_and_resolved_path(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nslices: {terminal: {kind: terminal, path: ../demo_tasks}}\nvariants: [{name: o, agent: oracle}]\n"
    )
    with pytest.raises(CampaignError) as error:
        load_campaign(str(tmp_path / "mine.yaml"))
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'mine.yaml'}: field slices.terminal.path: ")
    assert f"{tmp_path.parent / 'demo_tasks'} does not exist (from '../demo_tasks')" in message
    assert "builtin:demo_tasks" in message, "the error says what to write instead"


def test_builtin_paths_stay_inside_the_package():
    hostile = {**SLICES, "slices": {"t": {"kind": "terminal", "path": "builtin:../../etc"}}}
    with pytest.raises(CampaignError, match=r"field slices.t.path: 'builtin:../../etc' leaves eval_pipeline's own"):
        parse_campaign(hostile, "my.yaml")


def test_a_campaign_that_is_not_a_mapping_is_refused(tmp_path):
    (tmp_path / "list.yaml").write_text("- name: mine\n")
    with pytest.raises(CampaignError, match=r"list.yaml: Input should be a valid dictionary"):
        load_campaign(str(tmp_path / "list.yaml"))


def test_the_demo_plan_is_the_one_its_stored_results_were_made_under():
    """The plan's hash keys stored results: the typed file must hash exactly as the hand-read one did."""
    assert load_campaign("demo").plan_version == "fa198f1fc54db0cca57116b32328fd43f3805bb3de0e3083dd50e3c2128249cc"


def test_a_campaign_file_cannot_run_code_when_it_is_read(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "evil.yaml").write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(CampaignError, match=r"evil.yaml: not valid YAML at line 1, column 7: could not determine"):
        load_campaign(str(tmp_path / "evil.yaml"))
    assert not marker.exists()


COMMAND = {"name": "mine", "agent": "command", "params": {"command": "my-agent"}}
OPT_IN = {"allow_untrusted_agents_locally": True}


def test_an_untrusted_agent_on_the_local_backend_is_refused_in_one_line_naming_the_way_out():
    with pytest.raises(CampaignError) as error:
        parse_campaign({**MINIMAL, "variants": [*MINIMAL["variants"], COMMAND]}, "my.yaml")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("my.yaml: field variants[1].agent: variant 'mine' (agent 'command') runs code")
    assert "sandbox: {backend: container}" in message and "sandbox: {allow_untrusted_agents_locally: true}" in message


def test_every_built_in_campaign_loads_with_only_trusted_agents_but_the_llm_demo_which_opts_in():
    for name in builtin_campaigns():
        campaign = load_campaign(name)
        untrusted = [variant.agent for variant in campaign.variants if not variant.make_agent().trusted]
        if campaign.name == "demo_llm":  # its model's commands run through the tool server, as the user
            assert untrusted == ["llm"] and campaign.sandbox.allow_untrusted_agents_locally
        else:
            assert not untrusted and not campaign.sandbox.allow_untrusted_agents_locally, name


def test_untrusted_agents_run_locally_only_with_the_opt_in_and_their_results_say_so(tmp_path):
    opted_in = parse_campaign({**MINIMAL, "variants": [COMMAND], "sandbox": OPT_IN}, "my.yaml")
    record = make_sandbox(opted_in.sandbox, tmp_path, opted_in.resources, opted_in.name).resources_record()
    assert record["allow_untrusted_agents_locally"] is True
    plain = parse_campaign(MINIMAL, "my.yaml")
    assert (
        "allow_untrusted_agents_locally"
        not in make_sandbox(plain.sandbox, tmp_path, plain.resources, "x").resources_record()
    )
    assert parse_campaign({**MINIMAL, "variants": [COMMAND], "sandbox": {"backend": "container"}}, "x").variants


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({**OPT_IN, "backend": "container"}, "allow_untrusted_agents_locally: only the local backend runs agents"),
        ({"allow_untrusted_agents_locally": "yes"}, "allow_untrusted_agents_locally: Input should be a valid boolean"),
    ],
)
def test_the_opt_in_is_checked_like_any_sandbox_field(sandbox, message):
    with pytest.raises(CampaignError, match=rf"my\.yaml: field sandbox\.{message}"):
        parse_campaign({**MINIMAL, "sandbox": sandbox}, "my.yaml")


def test_the_dagster_code_location_refuses_an_untrusted_agent_on_the_local_backend_too(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({**MINIMAL, "variants": [COMMAND]}))
    env = {**os.environ, "EVAL_PIPELINE_CAMPAIGNS": str(mine)}
    loaded = subprocess.run(
        [sys.executable, "-c", "import eval_pipeline.definitions"], env=env, capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode != 0
    assert f"CampaignError: {mine}: field variants[0].agent: variant 'mine' (agent 'command') runs" in loaded.stderr


@pytest.mark.parametrize("backend", ["container", "kubernetes"])
def test_untrusted_trials_never_share_a_pod_where_a_neighbour_could_run_them_out_of_memory(backend):
    shared = {"backend": backend, "pod_parallelism": 2}
    with pytest.raises(CampaignError) as error:
        parse_campaign({**MINIMAL, "variants": [*MINIMAL["variants"], COMMAND], "sandbox": shared}, "my.yaml")
    message = str(error.value)
    assert message.startswith("my.yaml: field sandbox.pod_parallelism: 2 lets trials of untrusted variants (mine)")
    assert "use 1" in message and "mode: strict" in message
    parse_campaign({**MINIMAL, "variants": [COMMAND], "sandbox": {**shared, "pod_parallelism": 1}}, "my.yaml")
    strict = {**shared, "mode": "strict"}
    if backend == "container":
        parse_campaign({**MINIMAL, "variants": [COMMAND], "sandbox": strict}, "my.yaml")
    else:  # the Kubernetes backend runs pods whatever the mode says
        with pytest.raises(CampaignError, match="pod_parallelism"):
            parse_campaign({**MINIMAL, "variants": [COMMAND], "sandbox": strict}, "my.yaml")
    parse_campaign({**MINIMAL, "sandbox": shared}, "my.yaml")  # trusted agents only: the harness's own code
