"""The scan that finds a campaign's trials still to run.

It lists the store instead of reading it per trial: one listing of `scored/`
(each final evaluation's marker) and one of `evaluation/` (so a marker whose
evaluation was quarantined as corrupt does not count), whatever the number of
trials.
"""

from collections.abc import Iterable, Mapping

from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.trial.evaluation import mark_scored
from eval_pipeline.trial.generation import Generation
from eval_pipeline.trial.spec import SCORED, TrialSpec, authentic_marker

__all__ = ["pending_trials"]


def _markers(store: ArtifactStore) -> dict[str, dict[str, set[str]]]:
    """Each scored id's evaluation keys with their fingerprints, from one listing of `scored/`: only markers
    whose MAC is right (one forged, or left before markers had a MAC, is passed over). An evaluation graded
    again after its record was rejected has a marker per grading: each fingerprint is kept."""
    markers: dict[str, dict[str, set[str]]] = {}
    for key in store.keys(SCORED):
        if marker := authentic_marker(store, key):
            trial_scored_id, evaluation_key, evaluation_fingerprint = marker
            markers.setdefault(trial_scored_id, {}).setdefault(evaluation_key, set()).add(evaluation_fingerprint)
    return markers


def _stored_final(identity: TrialSpec, store: ArtifactStore, evaluations: Mapping[str, str]) -> bool:
    """Whether an unmarked trial's final evaluation is stored, found through its generation (reads of both);
    the marker is left for the next scan (best effort: a scan needs no write access)."""
    if (payload := store.get(identity.generation_key)) is None:
        return False
    generation = Generation.from_payload(payload, key=identity.generation_key, reused=True)
    key = identity.evaluation_key(generation.patch_sha256)
    if key not in evaluations or (stored := store.get(key)) is None:
        return False
    mark_scored(store, identity.scored_id, key, stored)
    return True


def _intact(marked: Mapping[str, set[str]], evaluations: Mapping[str, str]) -> bool:
    """Whether one of a trial's marked evaluations is stored as it was marked: its fingerprint in the listing is
    one its markers (authenticated by their MAC) recorded, so an evaluation rewritten since does not count."""
    return any(evaluations[key] in marked_as for key, marked_as in marked.items())


def pending_trials(identities: Iterable[TrialSpec], store: ArtifactStore, verify: bool = False) -> list[TrialSpec]:
    """The trials with no scored final evaluation stored, in the order given.

    Two listings (`scored/`, `evaluation/`) decide every trial whose evaluation
    left a marker with the right MAC; a trial without one (not finished, its
    marker forged or left before markers had a MAC) costs a listing of
    `generation/` and a read or two if its generation is stored, and those
    reads check each record's MAC. With `verify`, each marked evaluation's
    fingerprint in the listing must be the one its marker recorded, so that a
    truncated, altered or forged evaluation makes its trial pending again, for
    a resume that must not trust what the store holds: on S3 the listing's
    ETags are the fingerprints (no read per trial); a local store hashes its
    files. Without `verify` a listed evaluation is taken as intact: the readers
    that count results (results/warehouse.py) check each one's MAC.
    """
    identities = list(identities)
    evaluations = store.fingerprints("evaluation") if verify else dict.fromkeys(store.keys("evaluation"), "")
    markers = _markers(store)
    marked = {
        i: {key: marked_as for key, marked_as in markers.get(i.scored_id, {}).items() if key in evaluations}
        for i in identities
    }
    damaged = {i for i, found in marked.items() if found and verify and not _intact(found, evaluations)}
    unmarked = [i for i in identities if not marked[i]]
    generations = set(store.keys("generation")) if unmarked else set()
    lost = {i for i in unmarked if i.generation_key not in generations or not _stored_final(i, store, evaluations)}
    return [i for i in identities if i in damaged or i in lost]
