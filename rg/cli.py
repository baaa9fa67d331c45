"""The command line shared by every job entry point: ``--config``, ``--set`` and, for resumable
jobs, ``--fresh`` / ``--no-progress``; and :func:`run_job`, which turns every expected error
into one line on stderr (exit 2) and Ctrl-C into a line saying how to resume (exit 130).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence, TypeVar

from rg.config import Config, ConfigError, apply_overrides, load_config, read_yaml
from rg.console import quiet_console, user_stream

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
    parser.add_argument("--verbose", action="store_true",
                        help="show Ray's own log lines and dependencies' warnings here, not only in the run's log file")
    if resumable:
        parser.add_argument("--fresh", action="store_true", help="delete output_dir first instead of resuming")
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def load_job_config(args: argparse.Namespace, model: type[C]) -> C | None:
    """The validated config, or None after printing why it is invalid to stderr.

    Under ``ray job submit`` relative paths are resolved against the storage root
    (:mod:`rg.data.storage`); a missing root raises StorageRootError before any work.
    """
    from rg.data.storage import resolve_paths, storage_root, submitted_job

    try:
        cfg = load_config(args.config, model, args.overrides)
        if not submitted_job():
            return cfg
        root = storage_root(config_storage_root(args))
        cfg = resolve_paths(cfg, root)
        print(f"submitted Ray job: relative paths resolve against the storage root {root}", file=user_stream())
        return cfg
    except ConfigError as err:
        print(err, file=user_stream())
        return None


def config_storage_root(args: argparse.Namespace) -> str | None:
    """The config file's top-level ``storage_root:`` (after ``--set storage_root=...``), or None.

    Raises:
        ConfigError: when the file cannot be read.
    """
    raw = apply_overrides(read_yaml(args.config), [o for o in args.overrides if o.startswith("storage_root=")])
    value = raw.get("storage_root")
    return None if value is None else str(value)


def config_kind(args: argparse.Namespace, default: str) -> str | None:
    """The ``kind:`` the config file names (``default`` when absent), or None after printing why it cannot be read.

    Entry points that run more than one kind (``jobs.train``, ``jobs.evaluate``) dispatch on it.
    """
    try:
        return str(read_yaml(args.config).get("kind", default))
    except ConfigError as err:
        print(err, file=user_stream())
        return None


EXIT_EXPECTED = 2
"""Exit status of a job stopped by an expected error (bad config or input, locked output, ...)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def expected_errors() -> tuple[type[BaseException], ...]:
    """Errors a user can cause and fix, printed as one line; anything else keeps its traceback."""
    from rg.data.hf import HubUnavailableError
    from rg.data.integrity import DamagedFileError, EmptyInputError
    from rg.data.records import BadRowError
    from rg.data.splits import DuplicateIdError
    from rg.data.storage import StorageRootError
    from rg.llm.config import MissingAPIKeyError
    from rg.stores.base import StoreError
    from rg.stores.virtuoso import VirtuosoError
    from rg.locks import OutputLockedError
    from rg.llm.probe import EndpointDownError
    from rg.models.registry import ModelNotAvailableError
    from rg.text.encoder import EncoderLoadError
    from rg.kgedits import EditLogError, EditRejected

    return (EditRejected, EditLogError, ConfigError, FileNotFoundError, NotADirectoryError, DamagedFileError, EmptyInputError, BadRowError, MissingAPIKeyError,
            OutputLockedError, EndpointDownError, StorageRootError, EncoderLoadError, HubUnavailableError,
            VirtuosoError, StoreError, ModelNotAvailableError, DuplicateIdError)


def run_job(module: str, main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run a job's ``main`` on a quiet console (:func:`rg.console.quiet_console`; ``--verbose`` keeps
    everything on the terminal); return its exit status.

    Expected errors (see :func:`expected_errors`) print ``<module>: <message>`` on one line and
    return 2; Ctrl-C prints how to resume and returns 130; unexpected errors propagate with
    their traceback, printed after standard error is restored.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    asks_help = "-h" in args or "--help" in args  # usage only: no run, no log file
    with quiet_console(module, verbose="--verbose" in args or asks_help or not _real_stderr()):
        try:
            return main(argv)
        except KeyboardInterrupt:
            print(f"\n{module}: interrupted. Finished work is kept; resume with: python -m {module} {' '.join(args)}",
                  file=user_stream())
            return EXIT_INTERRUPTED
        except expected_errors() as err:
            message = " ".join(str(err).split("\n")) if not isinstance(err, ConfigError) else str(err)
            if isinstance(err, KeyError):
                message = str(err.args[0]) if err.args else message
            print(f"{module}: {message}", file=user_stream())
            return EXIT_EXPECTED


def _real_stderr() -> bool:
    """Whether ``sys.stderr`` writes to file descriptor 2 (not a test's in-memory capture)."""
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False
