"""Selecting a subset of a campaign's trials: filters of its own plan, checked against it."""

import pytest

from eval_pipeline.trial.selection import EVERY_TRIAL, SelectionError, TrialSelection
from eval_pipeline.trial.spec import TrialSpec


def spec(instance_id: str, variant: str, seed: int, slice_name: str = "s") -> TrialSpec:
    return TrialSpec(
        campaign="c",
        slice=slice_name,
        instance_id=instance_id,
        trial=f"{variant}-s{seed}",
        variant=variant,
        agent=variant,
        seed=seed,
        agent_config_hash="h",
        generation_key="g",
        environment_key="e",
        test_timeout_s=60.0,
        resources={},
    )


PLAN = [
    spec(instance_id, variant, seed, "code" if instance_id.startswith("a") else "terminal")
    for instance_id in ("a-1", "a-2", "t-1")
    for variant in ("oracle", "null")
    for seed in (0, 1)
]


def test_filters_combine_and_the_limit_keeps_the_campaigns_order():
    assert EVERY_TRIAL.everything and EVERY_TRIAL.pick(PLAN) == PLAN
    picked = TrialSelection(instances=("a-2", "t-1"), variants=("oracle",), seeds=(1,)).pick(PLAN)
    assert [(s.instance_id, s.trial) for s in picked] == [("a-2", "oracle-s1"), ("t-1", "oracle-s1")]
    assert [s.instance_id for s in TrialSelection(slices=("terminal",)).pick(PLAN)] == ["t-1"] * 4
    assert TrialSelection(limit=3).pick(PLAN) == PLAN[:3]
    assert not TrialSelection(limit=3).everything


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (TrialSelection(instances=("a-9",)), "--instance a-9: not in the campaign (it has a-1, a-2, t-1)"),
        (TrialSelection(variants=("oracle", "gpt")), "--variant gpt: not in the campaign"),
        (TrialSelection(slices=("docs",)), "--slice docs: not in the campaign (it has code, terminal)"),
        (TrialSelection(seeds=(7,)), "--seed 7: not in the campaign (it has 0, 1)"),
        (TrialSelection(limit=0), "--limit 0: must be at least 1"),
    ],
)
def test_a_filter_naming_what_the_campaign_lacks_is_an_error_not_an_empty_run(selection, message):
    with pytest.raises(SelectionError) as error:
        selection.pick(PLAN)
    assert message in str(error.value)


def test_a_command_over_instances_selects_by_instance_and_slice_only():
    slice_of = {"b": "code", "a": "code", "t": "terminal"}
    assert EVERY_TRIAL.pick_instances(slice_of) == ["a", "b", "t"]
    assert TrialSelection(slices=("code",), limit=1).pick_instances(slice_of) == ["a"]
    assert TrialSelection(instances=("t", "b")).pick_instances(slice_of) == ["b", "t"]
    with pytest.raises(SelectionError, match="--variant and --seed select trials, not instances"):
        TrialSelection(seeds=(0,)).pick_instances(slice_of)
    with pytest.raises(SelectionError, match=r"--slice docs: not in the campaign \(it has code, terminal\)"):
        TrialSelection(slices=("docs",)).pick_instances(slice_of)
