"""Datasets: the Sample record, readers (RoG, MetaQA), the synthetic generator, subgraph building."""

from rg.data.sample import ROG_COLUMNS, Question, Sample, Triple

__all__ = ["ROG_COLUMNS", "Question", "Sample", "Triple"]
