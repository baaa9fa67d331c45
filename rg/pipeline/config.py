"""The pipeline config: one section per stage, each the stage job's own config, wired together.

Each section is exactly the config of the job that runs alone (``build`` is
:class:`~rg.jobs.build_subgraphs.BuildSubgraphsConfig`, ``refine`` :class:`~rg.jobs.refine.RefineConfig`,
``train`` :class:`~rg.jobs.train_retriever.TrainJobConfig`, ``plan``
:class:`~rg.jobs.train_planner.PlannerTrainConfig`, ``read``
:class:`~rg.jobs.train_reader.ReaderTrainConfig`, ``evaluate``
:class:`~rg.jobs.evaluate.EvaluateConfig`, each entry of ``qa``
:class:`~rg.jobs.evaluate_qa.QAEvaluateConfig`), except that the keys that connect stages may be
left out and are filled in before validation (:func:`fill_sections`), every one only when the
section does not set it:

* ``output_dir`` of each stage: ``<output_dir>/<stage>`` (``<output_dir>/qa/<name>`` for QA runs);
* ``input`` of refine, train, plan, evaluate and QA: the build stage's shard folders, or the
  pipeline's ``input`` (RoG files) when there is no build stage;
* training labels of train and plan: the refine stage's labels (``source: refined``) when there
  is one (the planner learns their relation paths); weak labels by the answer-F1 rule
  (``labels: {source: weak, weak: {rule: answer_f1}}``) are searched on the whole KG the build stage
  cut its subgraphs from (``weak.kb``): on a capped subgraph a loop through a hub (film → Film type →
  film → date) reaches only the answer and ties with the direct path, which a planner then learns
  and follows on the whole KG;
* the retriever of evaluate and QA: the train stage's exported checkpoint; a method or QA
  retriever ``{kind: planner}`` without a ``path`` gets the plan stage's exported planner, and
  evaluate's default methods include it;
* a QA run with ``reasoner: dualtower`` needs no retriever; its local Brain without a
  ``planner`` gets the plan stage's exported planner (trained with ``mask_topics``, it reads the
  anonymised questions the Brain is sent);
* the tuned reader (``read``) learns from the train stage's retriever's evidence, and a QA run
  with ``reader: {kind: tuned}`` without a ``checkpoint`` reads with the read stage's export;
* ``split``, ``side``, ``encoder`` and ``ray``: the pipeline's, so every stage agrees on which
  questions are held out and shares one encoder cache;
* the Ray Train runs: ``run_name`` from the output folder, ``storage_path`` inside it.

A stage set to ``null`` (or left out) is skipped; its outputs must then be given as paths, e.g.
``build: null`` with ``input: "@shared/webqsp-evidence/webqsp_test_rog.jsonl.gz"``, or
``train: null`` with ``qa: {chains: {retriever: {kind: retriever, path: ...}}}``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.jobs.build_subgraphs import SYNTHETIC_DATASET, BuildSubgraphsConfig
from rg.data.synthetic.io import KG_FILE
from rg.data.splits import SplitConfig
from rg.jobs.evaluate import EvaluateConfig
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.runtime import RayConfig
from rg.jobs.refine import LABELS_DIR, RefineConfig
from rg.text.encoder import EncoderConfig
from rg.jobs.train_planner import PLANNER_DIR, PlannerTrainConfig
from rg.jobs.train_retriever import TrainJobConfig
from rg.jobs.train_reader import READER_DIR, ReaderTrainConfig

RETRIEVER_DIR = "retriever"
"""Folder of the train stage's exported checkpoint, inside its output_dir."""

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _mapping(value: Any) -> dict[str, Any] | None:
    """A section as a mutable mapping (None stays None; a config object is dumped once here)."""
    if value is None:
        return None
    if isinstance(value, Config):
        return value.model_dump()
    return dict(value) if isinstance(value, dict) else value


def _build_outputs(build: dict[str, Any]) -> str | list[str]:
    """The shard folders a build section writes: one per question source."""
    out = Path(str(build["output_dir"]))
    if build.get("synthetic") is not None:
        names = ["synthetic"]
    else:
        names = [str(q["name"]) for q in build.get("questions") or () if isinstance(q, dict) and "name" in q]
    folders = [str(out / name) for name in names]
    return folders[0] if len(folders) == 1 else folders


def _build_kb(build: dict[str, Any]) -> dict[str, Any] | None:
    """The KB source (``weak.kb``) of the KG a build section cuts its subgraphs from: the synthetic
    generator's ``dataset/kg.txt``, or the section's own ``kb`` (None for a KG store)."""
    if build.get("synthetic") is not None:
        return {"path": str(Path(str(build["output_dir"])) / SYNTHETIC_DATASET / KG_FILE), "format": "tsv"}
    kb = _mapping(build.get("kb"))
    return dict(kb) if isinstance(kb, dict) else None


def fill_sections(data: dict[str, Any]) -> dict[str, Any]:
    """Fill the connecting keys of every stage section (see the module docstring).

    Raises:
        ValueError: when no stage has an input (neither ``input`` nor ``build``), both are set,
            or an evaluation has no retriever to use (no ``train`` section and none given).
    """
    data = dict(data)
    root = data.get("output_dir")
    if not isinstance(root, str):
        return data  # field validation reports the missing/ill-typed output_dir
    wiring = _Wiring(data, Path(root))
    wiring.build()
    wiring.refine()
    wiring.train()
    wiring.plan()
    wiring.read()
    wiring.evaluate()
    wiring.qa()
    return data


class _Wiring:
    """The stages' sections in order, each filled from what the stages before it write: their inputs, their
    output folders, the refined labels, the retriever, planner and reader exports."""

    def __init__(self, data: dict[str, Any], base: Path) -> None:
        self.data, self.base = data, base
        self.shared = {key: _mapping(data[key]) for key in ("split", "encoder", "ray") if data.get(key) is not None}
        split = self.shared.get("split") or {}
        self.side = data.get("side") or ("test" if split.get("file") else "val")
        self.inputs: Any = data.get("input")
        self.kb: dict[str, Any] | None = None  # the KG the build stage cuts subgraphs from
        self.labels_dir: str | None = None
        self.retriever: dict[str, Any] | None = None
        self.planner: str | None = None
        self.reader_dir: str | None = None

    def with_shared(self, section: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        for key in keys:
            if key in self.shared:
                section.setdefault(key, self.shared[key])
        return section

    def build(self) -> None:
        data = self.data
        build = _mapping(data.get("build"))
        if build is not None:
            if data.get("input") is not None:
                raise ValueError("set either `input` (existing RoG files) or a `build` section, not both")
            build.setdefault("output_dir", str(self.base / "build"))
            data["build"] = self.with_shared(build, ("ray",))
            self.inputs = _build_outputs(build)
            self.kb = _build_kb(build)
        downstream = [name for name in ("refine", "train", "plan", "read", "evaluate") if data.get(name) is not None]
        downstream += ["qa"] if data.get("qa") else []
        if self.inputs is None and downstream:
            raise ValueError(
                f"stages {downstream} need questions: set `input` to RoG files/folders or add a `build` section"
            )

    def refine(self) -> None:
        refine = _mapping(self.data.get("refine"))
        if refine is not None:
            refine.setdefault("input", self.inputs)
            refine.setdefault("output_dir", str(self.base / "refine"))
            self.data["refine"] = self.with_shared(refine, ("encoder", "ray"))
            self.labels_dir = str(Path(str(refine["output_dir"])) / LABELS_DIR)

    def _ray_train(self, name: str, shared_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """A Ray Train stage (train, plan): inputs, outputs, its run, and the refined labels."""
        section = _mapping(self.data.get(name))
        if section is None:
            return None
        section.setdefault("input", self.inputs)
        section.setdefault("output_dir", str(self.base / name))
        section.setdefault("run_name", f"pipeline-{self.base.name or 'run'}-{name}")
        section.setdefault("storage_path", str(self.base / "ray_results"))
        labels = dict(_mapping(section.get("labels")) or {})
        if self.labels_dir is not None:
            labels.setdefault("source", "refined")
            if labels["source"] == "refined":
                labels.setdefault("path", self.labels_dir)
        weak = _mapping(labels.get("weak"))
        if (self.kb is not None and labels.get("source") == "weak" and isinstance(weak, dict)
                and weak.get("rule") == "answer_f1" and weak.get("kb") is None and weak.get("kg") is None):
            labels["weak"] = {**weak, "kb": self.kb}
        section["labels"] = labels
        self.data[name] = self.with_shared(section, shared_keys)
        return section

    def train(self) -> None:
        train = self._ray_train("train", ("split", "encoder", "ray"))
        if train is not None:
            self.retriever = {"kind": "retriever", "path": str(Path(str(train["output_dir"])) / RETRIEVER_DIR)}

    def plan(self) -> None:
        plan = self._ray_train("plan", ("split", "ray"))
        self.planner = None if plan is None else str(Path(str(plan["output_dir"])) / PLANNER_DIR)

    def with_planner(self, method: Any, where: str) -> Any:
        method = _mapping(method)
        if isinstance(method, dict) and method.get("kind") == "planner" and method.get("path") is None:
            if self.planner is None:
                raise ValueError(f"{where}: a planner without `path` needs a `plan` stage; add one or set the path")
            method = {**method, "path": self.planner}
        return method

    def with_brain_planner(self, dualtower: Any, where: str) -> Any:
        """A dual-tower run's local Brain without a ``planner`` reads the plan stage's export."""
        dualtower = _mapping(dualtower)
        if not isinstance(dualtower, dict):
            return dualtower
        brain = _mapping(dualtower.get("brain")) or {}
        if isinstance(brain, dict) and brain.get("kind", "local") == "local" and brain.get("planner") is None:
            if self.planner is None:
                raise ValueError(f"{where}: a local Brain without `planner` needs a `plan` stage; add one or set the path")
            dualtower = {**dualtower, "brain": {**brain, "planner": self.planner}}
        return dualtower

    def read(self) -> None:
        read = _mapping(self.data.get("read"))
        if read is None:
            return
        read.setdefault("input", self.inputs)
        read.setdefault("output_dir", str(self.base / "read"))
        read.setdefault("run_name", f"pipeline-{self.base.name or 'run'}-read")
        read.setdefault("storage_path", str(self.base / "ray_results"))
        if "retriever" not in read:
            if self.retriever is None:
                raise ValueError("read: set `retriever` (the evidence the reader learns from); there is no train stage")
            read["retriever"] = self.retriever
        read["retriever"] = self.with_planner(read["retriever"], "read.retriever")
        self.data["read"] = self.with_shared(read, ("split", "encoder", "ray"))
        self.reader_dir = str(Path(str(read["output_dir"])) / READER_DIR)

    def with_tuned_hand(self, dualtower: Any, where: str) -> Any:
        """A dual-tower run's tuned Hand without a ``reader`` (``retriever``) reads the read (train) stage's export."""
        if not isinstance(dualtower, dict):
            return dualtower
        hand = _mapping(dualtower.get("hand")) or {}
        if not (isinstance(hand, dict) and hand.get("kind") == "tuned"):
            return dualtower
        if hand.get("reader") is None:
            if self.reader_dir is None:
                raise ValueError(f"{where}: a tuned Hand without `reader` needs a `read` stage; add one or set the path")
            hand = {**hand, "reader": self.reader_dir}
        if "retriever" not in hand and self.retriever is not None:
            hand = {**hand, "retriever": self.retriever["path"]}
        return {**dualtower, "hand": hand}

    def evaluate(self) -> None:
        evaluate = _mapping(self.data.get("evaluate"))
        if evaluate is None:
            return
        evaluate.setdefault("input", self.inputs)
        evaluate.setdefault("output_dir", str(self.base / "evaluate"))
        evaluate.setdefault("side", self.side)
        evaluate.setdefault(
            "methods",
            ([self.retriever] if self.retriever else []) + ([{"kind": "planner"}] if self.planner else [])
            + [{"kind": "cosine"}, {"kind": "hop_distance"}],
        )
        evaluate["methods"] = [self.with_planner(m, "evaluate.methods") for m in evaluate["methods"] or []]
        if self.labels_dir is not None:
            evaluate.setdefault("labels", {"refined": self.labels_dir})
        self.data["evaluate"] = self.with_shared(evaluate, ("split", "encoder"))

    def qa(self) -> None:
        qa = dict(self.data.get("qa") or {})
        for name, section in qa.items():
            qa[name] = self.with_shared(self._qa_run(str(name), _mapping(section) or {}), ("split", "encoder", "ray"))
        self.data["qa"] = qa

    def _qa_run(self, name: str, run: dict[str, Any]) -> dict[str, Any]:
        run.setdefault("input", self.inputs)
        run.setdefault("output_dir", str(self.base / "qa" / name))
        run.setdefault("side", self.side)
        if run.get("reasoner") == "dualtower":
            run["dualtower"] = self.with_tuned_hand(
                self.with_brain_planner(run.get("dualtower"), f"qa.{name}.dualtower.brain"), f"qa.{name}.dualtower.hand")
        else:
            if "retriever" not in run:
                if self.retriever is None:
                    raise ValueError(f"qa.{name}: set `retriever` (a checkpoint path or a baseline); there is no train stage")
                run["retriever"] = self.retriever
            run["retriever"] = self.with_planner(run["retriever"], f"qa.{name}.retriever")
        reader = _mapping(run.get("reader"))
        if isinstance(reader, dict) and reader.get("kind") == "tuned" and reader.get("checkpoint") is None:
            if self.reader_dir is None:
                raise ValueError(f"qa.{name}.reader: a tuned reader without `checkpoint` needs a `read` stage")
            run["reader"] = {**reader, "checkpoint": self.reader_dir}
        return run


class PipelineConfig(Config):
    """Every stage of the KG-RAG workflow in one file: build → refine → train → plan → evaluate → QA."""

    KIND: ClassVar[str] = "pipeline"

    output_dir: str = Field(description="Root of every stage's outputs and of the pipeline report and state.")
    input: str | list[str] | None = Field(
        None, description="RoG files/folders when there is no `build` stage (e.g. `@shared/...`)."
    )
    split: SplitConfig | None = Field(None, description="Train/val/test membership shared by train, evaluate and QA.")
    side: Literal["val", "test"] | None = Field(
        None, description="Side evaluate and QA score (default: `test` with a split file, else `val`)."
    )
    encoder: EncoderConfig | None = Field(None, description="Text encoder shared by every stage that encodes.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Where Ray runs (shared by every stage).")
    build: BuildSubgraphsConfig | None = Field(None, description="Generate/read the KG and cut subgraphs; null: use `input`.")
    refine: RefineConfig | None = Field(None, description="Refine weak labels (ReG S(I)); null: train on weak labels.")
    train: TrainJobConfig | None = Field(None, description="Train a triple retriever on Ray Train; null: name checkpoints.")
    plan: PlannerTrainConfig | None = Field(
        None, description="Train the LoRA relation-path planner (ReG@Path) on Ray Train; null: no planner stage."
    )
    read: ReaderTrainConfig | None = Field(
        None, description="Train the LoRA-tuned local reader on the retriever's evidence; null: no reader stage."
    )
    evaluate: EvaluateConfig | None = Field(None, description="Retrieval recall@K of the retriever and baselines.")
    qa: dict[str, QAEvaluateConfig] = Field(
        default_factory=dict, description="QA runs by name (e.g. chains vs raw triples), each scored on `side`."
    )

    @model_validator(mode="before")
    @classmethod
    def _wire_stages(cls, data: Any) -> Any:
        return fill_sections(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _check_names(self) -> "PipelineConfig":
        bad = [name for name in self.qa if not _NAME.match(name)]
        if bad:
            raise ValueError(f"qa run names {bad} must be folder names (letters, digits, `_`, `.`, `-`)")
        if not any((self.build, self.refine, self.train, self.plan, self.read, self.evaluate, self.qa)):
            raise ValueError("no stage is configured; add at least one of build, refine, train, plan, evaluate, qa")
        return self
