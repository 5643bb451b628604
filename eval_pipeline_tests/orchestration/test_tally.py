"""A run's progress for people: done of total, resolved, elapsed, time left, tokens and cost."""

from eval_pipeline.orchestration.tally import Tally, duration


def test_the_tally_estimates_what_is_left_from_the_time_per_trial_so_far():
    now = [100.0]
    tally = Tally(total=4, clock=lambda: now[0])
    assert tally.line() == "0/4 done · 0 resolved · 0s elapsed · ETA ? · 0 tokens · $0.00"
    now[0] = 130.0
    tally.add("resolved", {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0125})
    tally.add("unresolved", None)
    assert tally.line() == "2/4 done · 1 resolved · 30s elapsed · ETA 30s · 1.5k tokens · $0.01"
    now[0] = 100.0 + 2 * 3600
    tally.add("oom_killed (run 1)")
    tally.add("resolved", {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.5})
    assert tally.line() == "4/4 done · 2 resolved · 2h00m elapsed · ETA 0s · 1.5k tokens · $0.51"


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0, 42.4, 185, 3725, -3)] == ["0s", "42s", "3m05s", "1h02m", "0s"]
