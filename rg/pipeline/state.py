"""What the pipeline has done: per stage, the config it ran with and whether it finished.

``<output_dir>/pipeline_state.json`` maps each stage to its *fingerprint* (a hash of the stage's
config and of the fingerprints of the stages before it, so a changed upstream stage invalidates
everything after it), its status (``running`` or ``done``) and, once done, its summary. A stage
is skipped when it is ``done`` with the same fingerprint and its completion file exists;
``running`` with the same fingerprint resumes (each stage job resumes its own work); a
different fingerprint means its outputs are stale and are cleared before it runs again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from rg.config import Config

STATE_FILE = "pipeline_state.json"

Decision = Literal["skip", "resume", "restart", "start"]


def fingerprint(section: Config, upstream: str) -> str:
    """Hash of a stage's config (without its ``ray`` placement) and the upstream fingerprint."""
    data = section.model_dump(mode="json", exclude={"ray"} if "ray" in type(section).model_fields else None)
    text = json.dumps({"config": data, "upstream": upstream}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class PipelineState:
    """The state file of one pipeline output folder (read on creation, written on each change)."""

    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / STATE_FILE
        self.stages: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            self.stages = dict(json.loads(self.path.read_text()).get("stages", {}))

    def decide(self, stage: str, print_: str, complete: Path) -> Decision:
        """What to do with ``stage`` given its fingerprint ``print_`` and completion file."""
        record = self.stages.get(stage)
        if record is None:
            return "start"
        if record.get("fingerprint") != print_:
            return "restart"
        if record.get("status") == "done" and complete.exists():
            return "skip"
        return "resume"

    def summary(self, stage: str) -> dict[str, Any]:
        """The stored summary of a finished stage."""
        return dict(self.stages[stage]["summary"])

    def start(self, stage: str, print_: str) -> None:
        self.stages[stage] = {"fingerprint": print_, "status": "running"}
        self._save()

    def finish(self, stage: str, print_: str, seconds: float, summary: dict[str, Any]) -> None:
        self.stages[stage] = {"fingerprint": print_, "status": "done", "seconds": seconds, "summary": summary}
        self._save()

    def clear(self) -> None:
        """Forget every stage (``--fresh``)."""
        self.stages = {}
        self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stages": self.stages}, indent=2) + "\n")
        os.replace(tmp, self.path)
