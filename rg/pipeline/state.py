"""What the pipeline has done: per stage, the config it ran with and whether it finished.

``<output_dir>/pipeline_state.json`` maps each stage to its *fingerprint* (a hash of the stage's
config and of the fingerprints of the stages before it, so a changed upstream stage invalidates
everything after it), its status (``running`` or ``done``) and, once done, its summary. A stage
is skipped when it is ``done`` with the same fingerprint and its completion file exists;
``running`` with the same fingerprint resumes (each stage job resumes its own work); a
different fingerprint means its outputs are stale and are cleared before it runs again.

Each run of a stage also gets a *run id*, kept when it resumes, and what flows downstream is the
fingerprint with that id (:meth:`PipelineState.upstream_of`): when a stage runs again, even with a
config it ran with before (changed, interrupted, changed back), the stages after it run again too
instead of keeping results computed from its earlier outputs. States written before run ids pass the
bare fingerprint on, as they did.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
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
        """Mark ``stage`` running with fingerprint ``print_``: the run id of a run it resumes, else a new one."""
        record = self.stages.get(stage, {})
        resumed = record.get("fingerprint") == print_ and record.get("status") == "running" and record.get("run")
        self.stages[stage] = {"fingerprint": print_, "status": "running", "run": resumed or uuid.uuid4().hex[:12]}
        self._save()

    def finish(self, stage: str, print_: str, seconds: float, summary: dict[str, Any],
               pool: tuple[str, ...] = ()) -> None:
        """Mark ``stage`` done; ``pool`` names the stages one actor pool ran with it (``seconds`` is the pool's)."""
        run = self.stages.get(stage, {}).get("run")
        self.stages[stage] = {"fingerprint": print_, "status": "done", "seconds": seconds, "summary": summary,
                              **({"run": run} if run else {}), **({"pool": list(pool)} if pool else {})}
        self._save()

    def upstream_of(self, stage: str, print_: str) -> str:
        """What the stages after ``stage`` (fingerprint ``print_``, run or skipped) hash as their upstream."""
        run = self.stages.get(stage, {}).get("run")
        return f"{print_}:{run}" if run else print_

    def clear(self) -> None:
        """Forget every stage (``--fresh``)."""
        self.stages = {}
        self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stages": self.stages}, indent=2) + "\n")
        os.replace(tmp, self.path)
