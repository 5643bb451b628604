"""Hand-made results and a gate policy whose verdicts are known."""

from eval_pipeline_tests.support.result_rows import trial


def outcomes(flags: str) -> list[str]:
    return ["resolved" if flag == "1" else "unresolved" for flag in flags]


def slice_results(slice_name: str, variant: str, per_instance: list[str], **fields) -> list:
    """One trial per seed per instance: `per_instance[i]` is a string of 1s and 0s, one per seed."""
    return [
        trial(f"{slice_name[0]}{i}", variant, seed, outcome, slice=slice_name, **fields)
        for i, flags in enumerate(per_instance)
        for seed, outcome in enumerate(outcomes(flags))
    ]


# The candidate gains a lot on `code` and loses a little on `terminal`, where it falls under a 0.5 floor.
RESULTS = [
    *slice_results("code", "base", ["00", "00", "10", "00"]),
    *slice_results("code", "cand", ["11", "11", "11", "10"]),
    *slice_results("terminal", "base", ["11", "10", "00", "00"]),
    *slice_results("terminal", "cand", ["11", "00", "00", "00"]),
]

POLICY = {
    "environment": "prod",
    "candidate": "cand",
    "floors": {"terminal": 0.5, "*": 0.2},
    "max_regression": {"resolved_rate": 0.2},
}
