import pytest

from eval_pipeline.campaign import CampaignError, builtin_campaigns, load_campaign, parse_campaign

MINIMAL = {"name": "mine", "benchmark": {"kind": "demo"}, "variants": [{"name": "o", "agent": "oracle"}]}


def test_builtin_demo_campaign():
    assert "demo" in builtin_campaigns()
    campaign = load_campaign("demo")
    assert {v.name for v in campaign.variants} == {"oracle", "null", "flaky"}
    assert [t.key for t in campaign.trials][:2] == ["oracle-s0", "oracle-s1"]
    assert campaign.resources.memory_floor_mb < campaign.resources.memory_ceiling_mb


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
