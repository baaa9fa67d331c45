"""Datasets: the Sample record, readers (RoG parquet, MetaQA, WebQSP, KB files), splits, Ray Data row streams and
the synthetic generator. Subgraphs are cut by :mod:`rg.subgraphs`; the build job is :mod:`rg.jobs.build_subgraphs`."""

from rg.data.sample import ROG_COLUMNS, Question, Sample, Triple

__all__ = ["ROG_COLUMNS", "Question", "Sample", "Triple"]
