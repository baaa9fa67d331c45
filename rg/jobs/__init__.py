"""The Ray jobs: each module composes the libraries of the other packages into one stage of the data flow
(build → refine → train → evaluate; the privacy report, KG loading and sweeps beside them) and owns that
stage's typed config, its resumable output folder and its report. The top-level ``jobs/``, ``tune/`` and
``serve/`` packages are thin command lines over these modules; ``rg.pipeline`` runs them in order.

Libraries never import a job (``tests/test_import_layers.py``): a job's config holds the library configs it
passes down, not the other way round.
"""
