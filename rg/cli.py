"""The command line shared by every job entry point: ``--config``, ``--set`` and, for resumable
jobs, ``--fresh`` / ``--no-progress``."""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from rg.config import Config, ConfigError, load_config, read_yaml

C = TypeVar("C", bound=Config)


def job_parser(module: str, doc: str, model: type[Config], resumable: bool = False) -> argparse.ArgumentParser:
    """An argument parser for ``python -m <module>`` whose config is ``model``.

    Args:
        module: The job module, e.g. ``jobs.refine``.
        doc: The module docstring (its first line becomes the description).
        model: The config class; its ``KIND`` is named in the help.
        resumable: Add ``--fresh`` (start over instead of resuming) and ``--no-progress``.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.strip().split("\n")[0])
    parser.add_argument("--config", required=True, help=f"YAML file with `kind: {getattr(model, 'KIND', '?')}`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set output_dir=out (values are YAML; repeatable)")
    if resumable:
        parser.add_argument("--fresh", action="store_true", help="delete output_dir first instead of resuming")
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def load_job_config(args: argparse.Namespace, model: type[C]) -> C | None:
    """The validated config, or None after printing why it is invalid to stderr."""
    try:
        return load_config(args.config, model, args.overrides)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return None


def config_kind(args: argparse.Namespace, default: str) -> str | None:
    """The ``kind:`` the config file names (``default`` when absent), or None after printing why it cannot be read.

    Entry points that run more than one kind (``jobs.train``, ``jobs.evaluate``) dispatch on it.
    """
    try:
        return str(read_yaml(args.config).get("kind", default))
    except ConfigError as err:
        print(err, file=sys.stderr)
        return None
