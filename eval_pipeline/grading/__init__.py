"""What grading decides for a task of any kind (the verdict, a verifier's run) and what every kind's grading
shares: applying the model's patch, auditing what it reaches for, telling a run a limit stopped."""

from eval_pipeline.grading.patch_audit import AuditFlag, audit_patch
from eval_pipeline.grading.verdict import (
    GRADING_VERSION,
    Verdict,
    VerifierRun,
    apply_model_patch,
    stopped_by_a_limit,
)

__all__ = [
    "AuditFlag",
    "GRADING_VERSION",
    "Verdict",
    "VerifierRun",
    "apply_model_patch",
    "audit_patch",
    "stopped_by_a_limit",
]
