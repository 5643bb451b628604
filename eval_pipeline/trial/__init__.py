"""One trial, from its specification to its stored records: its lifecycle (run.py: `Trial.run`), the spec and its
keys (spec.py), generation, evaluation, the pending scan, what the store holds of a trial (records.py),
the reference run and instance validation, and the harness that builds the store and sandboxes."""

from eval_pipeline.trial.evaluation import Evaluation, evaluate
from eval_pipeline.trial.generation import Generation, generate
from eval_pipeline.trial.harness import Harness, harness_at
from eval_pipeline.trial.pending import pending_trials
from eval_pipeline.trial.records import ResultRow, StoredTrial, read_trials
from eval_pipeline.trial.run import Trial, TrialResult, TrialSetup, run_trials
from eval_pipeline.trial.spec import TrialSpec, trial_spec, trial_specs
from eval_pipeline.trial.validation import InstanceValidation, Status, validate_task

__all__ = [
    "Evaluation",
    "Generation",
    "Harness",
    "InstanceValidation",
    "ResultRow",
    "Status",
    "StoredTrial",
    "Trial",
    "TrialResult",
    "TrialSetup",
    "TrialSpec",
    "evaluate",
    "generate",
    "harness_at",
    "pending_trials",
    "read_trials",
    "run_trials",
    "trial_spec",
    "trial_specs",
    "validate_task",
]
