"""Materializations written to and read from a Dagster instance's event log storage."""

import time

from dagster import AssetKey, AssetMaterialization, DagsterEvent, DagsterEventType, DagsterInstance
from dagster._core.events import StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import EventLogStorage

ASSET = AssetKey(["demo", "evaluation"])


def store_materializations(instance: DagsterInstance, run_id: str, partitions: list[str]) -> None:
    store_materializations_in(instance.event_log_storage, run_id, partitions)


def store_materializations_in(storage: EventLogStorage, run_id: str, partitions: list[str]) -> None:
    for partition in partitions:
        materialization = AssetMaterialization(ASSET, partition=partition, metadata={"partition": partition})
        event = DagsterEvent(
            DagsterEventType.ASSET_MATERIALIZATION.value,
            "trials_job",
            event_specific_data=StepMaterializationData(materialization),
        )
        entry = EventLogEntry(None, 20, "", run_id, time.time(), dagster_event=event, job_name="trials_job")
        storage.store_event(entry)


def materialized_partitions(instance: DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(ASSET, limit=1_000).records
    return sorted(record.asset_materialization.partition for record in records)
