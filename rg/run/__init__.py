"""Run infrastructure every job shares: where data and outputs live (``paths``, ``storage``, ``remote``
staging of s3/gs outputs), verified files (``integrity``), one writer per output folder (``locks``) and
the check that a resumed Ray run is the same run (``guard``), and free loopback ports that Ray
does not claim (``ports``). Imports nothing else from ``rg`` but
``rg.config`` and ``rg.console``.
"""
