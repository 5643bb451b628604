"""Deferred removal: a trial's container removed on a thread of this process, behind its trial (`remove_soon`),
and waited for by whoever needs it gone (`removals_done`)."""

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from docker.models.containers import Container

from eval_pipeline.sandbox.pods.engine import ENGINE_FAILURES

REMOVAL_THREADS = 2  # trial containers this process removes at once, behind its trials (remove_soon)
# Trial containers being removed behind the trials of this process.
_removals: ThreadPoolExecutor | None = None
_pending_removals: set[Future] = set()
_removals_lock = threading.Lock()

logger = logging.getLogger(__name__)


def remove_soon(container: Container) -> None:
    """Remove a trial's container (stopping what runs in it) on a thread of this process, while the trial's
    records are stored: the engine takes 0.2-0.5 s a container, a tenth of a short trial's wall. `release`
    and `removals_done` wait for it; a process that dies first leaves it to `release` or the janitor. (On
    Podman with netavark before 1.9 a removal beside another container's start changed the default bridge's
    address and stalled that container's network for a minute: the engine set-up pins the bridge, docs/SANDBOXES.md.)"""
    global _removals
    with _removals_lock:
        _removals = _removals or ThreadPoolExecutor(max_workers=REMOVAL_THREADS, thread_name_prefix="remove")
        removal = _removals.submit(_remove, container)
        _pending_removals.add(removal)
    removal.add_done_callback(_forget)


def _remove(container: Container) -> None:
    try:
        container.remove(force=True)
    except ENGINE_FAILURES as error:  # the janitor removes what the engine could not remove now
        logger.warning("could not remove %s: %s", container.name, error)


def _forget(removal: Future) -> None:
    with _removals_lock:
        _pending_removals.discard(removal)


def removals_done() -> None:
    """Wait until every trial container this process set out to remove is removed (or failed to be)."""
    with _removals_lock:
        pending = list(_pending_removals)
    wait(pending)


def _no_removals_in_a_child() -> None:
    """A forked child has none of its parent's threads: it starts its own, and waits only for its own removals."""
    global _removals, _removals_lock
    _removals, _removals_lock = None, threading.Lock()
    _pending_removals.clear()


os.register_at_fork(after_in_child=_no_removals_in_a_child)
