"""Configuration of the PNA entity retriever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from rg.retrievers.walk import WalkConfig

Aggregator = Literal["sum", "mean", "min", "max", "var", "std"]
Scaler = Literal["identity", "amplification", "attenuation", "linear", "inverse_linear"]


class PNAConfig(WalkConfig):
    """Settings of :class:`~rg.retrievers.pna.model.PNARetriever`.

    Aggregators and scalers default to those of the PNA paper (Corso et al., 2020). ``deg`` is
    the in-degree histogram of the training graphs under the model's own edge convention;
    leave it None in YAML and let training fill it (``PNARetriever.prepare_config`` /
    ``build_retriever(..., train_graphs=...)``); it is saved with the checkpoint, so inference
    uses the training statistics.
    """

    kind: Literal["pna"] = Field("pna", description="Registry name; always 'pna'.")
    hidden: int = Field(64, gt=0, description="Width of node states and projected edge features.")
    num_layers: int = Field(2, ge=1, description="PNAConv layers (message-passing hops).")
    aggregators: tuple[Aggregator, ...] = Field(
        ("mean", "min", "max", "std"), min_length=1, description="PNA aggregators."
    )
    scalers: tuple[Scaler, ...] = Field(
        ("identity", "amplification", "attenuation"), min_length=1, description="PNA degree scalers."
    )
    towers: int = Field(1, ge=1, description="PNAConv towers; must divide `hidden`.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout between PNA layers.")
    reverse_edges: bool = Field(
        True,
        description=(
            "Also pass messages tail → head along every triple, flagged as reversed in the edge "
            "features, so an entity hears from both sides (a head with no incoming triple "
            "otherwise receives nothing)."
        ),
    )
    deg: tuple[int, ...] | None = Field(
        None,
        description=(
            "Histogram of node in-degrees over the training graphs (deg[i] = nodes with in-degree i), "
            "with the same edge convention as the forward pass. None until training fills it."
        ),
    )
    loss: Literal["triple", "entity"] = Field(
        "triple",
        description=(
            "'triple': BCE on triple scores p(h) + p(t) against the triple labels (the same "
            "objective as MLP-DDE). 'entity': BCE on entity logits p(e) against entity labels "
            "(an entity is positive when it is the head or tail of a positive triple)."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> "PNAConfig":
        if self.hidden % self.towers:
            raise ValueError(
                f"towers ({self.towers}) must divide hidden ({self.hidden}); set towers to a divisor of hidden"
            )
        if self.deg is not None and (not self.deg or any(d < 0 for d in self.deg) or sum(self.deg) == 0):
            raise ValueError(
                "deg must be a non-empty histogram of non-negative counts with at least one node; "
                "leave it None so training computes it from the training graphs"
            )
        return self

    def with_deg(self, deg: Sequence[int]) -> "PNAConfig":
        """A validated copy with the in-degree histogram set."""
        return PNAConfig.model_validate({**self.model_dump(), "deg": tuple(int(d) for d in deg)})
