"""The typed end of every trial and every attempt, and the errors that carry infrastructure outcomes.

Every outcome has a kind, which decides what happens next:

- `agent`: a verdict on the agent (its patch was judged, or the agent itself
  crashed or ran out of its time). Scored, final, never retried.
- `infrastructure`: the harness's machinery failed (the kernel's OOM killer at
  the ceiling, a test run cut off by its time limit, a lost pod, the engine,
  an image build, the artifact store). Not a score: it is kept as an attempt,
  retried with backoff up to a bound, and shown in coverage, never as a zero.
  A test run stopped by a limit within which the instance's reference solution
  is known to pass is the patch's doing instead (trial/limits.py): it ends in
  the limit's `patch_` outcome, of kind `agent`. So does any test run that
  ended abnormally where the reference, graded at once, resolved
  (trial/evaluation.py): every planned trial counts unless the harness shows the
  fault is its own.
- `harness`: the harness could not judge a patch it did run (a test patch that
  does not apply, a missing or malformed report), or an agent's model API
  refused its configuration (a bad key, an unknown model), or a task's named
  image cannot be what the campaign says (no such image, access denied, not at
  its pinned digest). Not a score, and not retried
  automatically, since trying again gives the same answer until the dataset or
  the harness is fixed; a re-run after the fix grades it.
"""

import errno
from enum import StrEnum


class OutcomeKind(StrEnum):
    AGENT = "agent"
    INFRASTRUCTURE = "infrastructure"
    HARNESS = "harness"


class Outcome(StrEnum):
    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    AGENT_ERROR = "agent_error"  # the agent raised or its command failed to run
    AGENT_TIMEOUT = "agent_timeout"  # the agent ran over its own time limit
    AGENT_LIMIT = "agent_limit"  # the agent used up its steps, tokens or cost
    # A graded test is absent from the test run's results (the patch broke its collection, say): scored as not
    # resolved, as SWE-bench scores it, but named apart so the report shows it.
    TESTS_MISSING = "tests_missing"
    # The test report says the harness's canary test passed: code in the test process rewrote the results.
    # Scored as not resolved, named apart so that a forged pass is seen and counted.
    REPORT_FORGED = "report_forged"
    # The tests did not finish in time. Slow machines and noisy neighbours cause
    # this as often as bad patches do, so it is not held against the agent
    # unless the reference is known to pass in that time (PATCH_TEST_TIMEOUT).
    TEST_TIMEOUT = "test_timeout"
    OOM_KILLED = "oom_killed"  # killed at the memory ceiling: a resource verdict, not the agent's
    # The same two limits, hit by tests the reference solution passes within them (trial/limits.py): the
    # patch's own code needed more, so they are scored as not resolved.
    PATCH_TEST_TIMEOUT = "patch_test_timeout"
    PATCH_OOM_KILLED = "patch_oom_killed"
    # The test run ended abnormally (no report, a crash, the engine refusing its command, a verifier killed by a
    # signal) where the instance's reference, graded at once in the same environment under the same limits,
    # resolved: the patch broke the run, so it is scored as not resolved (trial/evaluation.py, intention to treat).
    PATCH_BROKE_TEST_RUN = "patch_broke_test_run"
    SANDBOX_LOST = "sandbox_lost"  # the pod, container or environment vanished under a command
    ENGINE_ERROR = "engine_error"  # the container engine (or its API) failed or was unreachable
    IMAGE_BUILD_FAILED = "image_build_failed"
    STORAGE_ERROR = "storage_error"  # the artifact store could not be read or written, or the disk is full
    MODEL_API_ERROR = "model_api_error"  # the model API stayed rate-limited, failing or unreachable
    GRADING_ERROR = "grading_error"
    # The model API refused the agent's requests (a bad key, an unknown model, a parameter it does not take):
    # the campaign's configuration, which gives the same answer until it is fixed.
    MODEL_API_REFUSED = "model_api_refused"
    # A task's named image could not be pulled (sandbox/pods/registry.py). The user's configuration, not retried:
    # the registry has no such image (IMAGE_NOT_FOUND), refused the credentials (IMAGE_PULL_DENIED), or holds it
    # at another digest than the campaign pins (IMAGE_DIGEST_MISMATCH). The harness's machinery, retried: the
    # registry did not answer (IMAGE_PULL_FAILED), or the image does not fit on the engine's disk (IMAGE_NO_SPACE).
    IMAGE_NOT_FOUND = "image_not_found"
    IMAGE_PULL_DENIED = "image_pull_denied"
    IMAGE_DIGEST_MISMATCH = "image_digest_mismatch"
    IMAGE_PULL_FAILED = "image_pull_failed"
    IMAGE_NO_SPACE = "image_no_space"

    @property
    def kind(self) -> OutcomeKind:
        return _KINDS[self]

    @property
    def is_scored(self) -> bool:
        return self.kind is OutcomeKind.AGENT

    @property
    def is_retried(self) -> bool:
        """Whether a trial that ended here is tried again automatically (with backoff, up to a bound)."""
        return self.kind is OutcomeKind.INFRASTRUCTURE

    @property
    def is_resolved(self) -> bool:
        return self is Outcome.RESOLVED


_KINDS = {
    **dict.fromkeys(
        (
            Outcome.RESOLVED,
            Outcome.UNRESOLVED,
            Outcome.PATCH_APPLY_FAILED,
            Outcome.AGENT_ERROR,
            Outcome.AGENT_TIMEOUT,
            Outcome.AGENT_LIMIT,
            Outcome.TESTS_MISSING,
            Outcome.REPORT_FORGED,
            Outcome.PATCH_TEST_TIMEOUT,
            Outcome.PATCH_OOM_KILLED,
            Outcome.PATCH_BROKE_TEST_RUN,
        ),
        OutcomeKind.AGENT,
    ),
    **dict.fromkeys(
        (
            Outcome.TEST_TIMEOUT,
            Outcome.OOM_KILLED,
            Outcome.SANDBOX_LOST,
            Outcome.ENGINE_ERROR,
            Outcome.IMAGE_BUILD_FAILED,
            Outcome.STORAGE_ERROR,
            Outcome.MODEL_API_ERROR,
            Outcome.IMAGE_PULL_FAILED,
            Outcome.IMAGE_NO_SPACE,
        ),
        OutcomeKind.INFRASTRUCTURE,
    ),
    **dict.fromkeys(
        (
            Outcome.GRADING_ERROR,
            Outcome.MODEL_API_REFUSED,
            Outcome.IMAGE_NOT_FOUND,
            Outcome.IMAGE_PULL_DENIED,
            Outcome.IMAGE_DIGEST_MISMATCH,
        ),
        OutcomeKind.HARNESS,
    ),
}


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXT = "No space left on device"  # what a command says when the disk under it is full


def no_space_left(error: BaseException) -> "StorageError | None":
    """The machine's full disk behind `error` (an OSError ENOSPC or EDQUOT, raised or chained), as the
    infrastructure failure it is; None for any other error. Harness code that runs inside an agent or a grading
    would otherwise have it counted as the agent's crash or a grading error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_SPACE_ERRNOS:
            return StorageError(f"no space left on the machine's disk: {seen}")
        seen = seen.__cause__ or seen.__context__
    return None


class InfrastructureError(RuntimeError):
    """The harness's machinery failed, not the agent or its patch; `outcome` says which part."""

    outcome: Outcome = Outcome.ENGINE_ERROR


class SandboxLost(InfrastructureError):
    """The environment (pod, container, directory) a command ran in is gone."""

    outcome = Outcome.SANDBOX_LOST


class OutOfMemory(InfrastructureError):
    """A command was killed at its memory ceiling."""

    outcome = Outcome.OOM_KILLED


class ImageBuildFailed(InfrastructureError):
    """An environment image failed to build; the message names the layer and its build log."""

    outcome = Outcome.IMAGE_BUILD_FAILED


class StorageError(InfrastructureError):
    """The artifact store, or the machine's disk, could not be read or written."""

    outcome = Outcome.STORAGE_ERROR


class ModelAPIError(InfrastructureError):
    """The model API an agent calls stayed unavailable (rate limits, 5xx, timeouts) or refused the request."""

    outcome = Outcome.MODEL_API_ERROR


class ModelAPIRefused(InfrastructureError):
    """The model API refused the agent's request for a reason of its own (401, 403, 404, a 400 that is not the
    context window): the campaign's configuration, not retried, never scored."""

    outcome = Outcome.MODEL_API_REFUSED


class ImagePullFailed(InfrastructureError):
    """A task's named image could not be pulled because the registry did not answer (or broke off); retried. The
    message names the instance and the image's reference, never a credential."""

    outcome = Outcome.IMAGE_PULL_FAILED


class ImageNoSpace(ImagePullFailed):
    """A named image does not fit on the engine's disk; retried (pruning may make room)."""

    outcome = Outcome.IMAGE_NO_SPACE


class ImageNotFound(ImagePullFailed):
    """The registry has no image of the reference a task names: the campaign's (or dataset's) to fix."""

    outcome = Outcome.IMAGE_NOT_FOUND


class ImagePullDenied(ImagePullFailed):
    """The registry refused the pull (no credentials, or ones it does not accept): the campaign's to fix."""

    outcome = Outcome.IMAGE_PULL_DENIED


class ImageDigestMismatch(ImagePullFailed):
    """The registry holds a named image at another digest than the campaign pins: the campaign's to fix."""

    outcome = Outcome.IMAGE_DIGEST_MISMATCH
