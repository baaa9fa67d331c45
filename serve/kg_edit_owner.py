"""The one writer of the KG's edits: a single-replica deployment that validates, logs and hands out edits.

``POST /v1/kg/edits`` reaches :meth:`KGEditOwner.edit`: the batch is resolved against the owner's
own copy of the KG (all or nothing; every bad edit named), appended to the edit log and fsynced,
applied to the copy, and only then acknowledged with the version it made. A SPARQL store is edited
in place by the owner (SPARQL Update), so every Hand reads the new version from the endpoint.
Hand replicas call :meth:`KGEditOwner.since` before each question and apply the records they have
not applied yet, in order (a replica started later replays the whole log on its first question).
Facts a batch deletes are also forgotten by the edge memory (:meth:`serve.memory_owner.MemoryOwner.forget`).

When the replica restarts (killed, or the whole app), it reopens the log: every acknowledged record
is replayed, and a torn last record (an append the crash cut short, never acknowledged) is named in
:meth:`status` and cut off (:class:`rg.kgedits.log.EditLog`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from rg.kgedits import EditBatch, EditLog, EditRejected
from rg.kgedits.editor import KGEditor, editable_store
from serve.config import ServeConfig
from serve.kg_source import load_kg
from serve.memory_owner import UNREACHABLE


@serve.deployment
class KGEditOwner:
    """The edit log's single writer (module docstring).

    Args:
        config: :class:`ServeConfig` as a dict (its ``kg_edits`` is set).
        memory: Handle of the MemoryOwner (None without memory): deleted facts' edge vectors are forgotten there.
    """

    def __init__(self, config: dict[str, Any], memory: DeploymentHandle | None = None) -> None:
        self.config = ServeConfig.model_validate(config)
        assert self.config.kg_edits is not None  # only deployed with kg_edits
        store, _ = load_kg(self.config)
        self.editor = KGEditor(editable_store(store), EditLog.open(self.config.kg_edits.log_path), self.config.kg_edits)
        self.memory = memory

    async def edit(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Apply one batch: ``{"record": ...}`` once it is durable, or ``{"rejected": [problems]}`` (nothing applied)."""
        try:
            record = await asyncio.to_thread(self.editor.edit, EditBatch.model_validate(batch))  # fsync off the loop
        except EditRejected as err:
            return {"rejected": [p.to_dict() for p in err.problems]}
        out: dict[str, Any] = {"record": record.to_dict()}
        if record.deletes and self.memory is not None:
            try:
                out["memory_forgotten"] = await asyncio.wait_for(
                    _await(self.memory.forget.remote([list(t) for t in record.deletes])), self.config.memory_timeout_s)
            except (asyncio.TimeoutError, *UNREACHABLE) as err:
                out["memory_forgotten"] = f"unavailable: {type(err).__name__}"  # replay still walks only current facts
        return out

    def since(self, version: int) -> list[dict[str, Any]]:
        """Records after ``version``, in order."""
        return [r.to_dict() for r in self.editor.since(version)]

    def version(self) -> int:
        return self.editor.version

    def status(self) -> dict[str, Any]:
        """The version, the records replayed when this replica opened the log and a torn tail it cut, if any."""
        torn = self.editor.log.report.torn
        records = self.editor.log.records
        return {"version": self.editor.version, "replayed": self.editor.replayed,
                "torn": torn.describe() if torn is not None else None,
                "added_since_base": sum(len(r.adds) for r in records),
                "deleted_since_base": sum(len(r.deletes) for r in records),
                "new_entities_since_base": sum(len(r.new_entities) for r in records)}

    def __del__(self) -> None:
        editor = getattr(self, "editor", None)
        if editor is not None:
            editor.close()


async def _await(response: Any) -> Any:
    return await response
