"""Live KG edits (issue 59): the edit model and its validation, the durable edit log, the versioned store.

See ``docs/kg_edits.md``. A batch of ``add``/``delete`` triples (by name or id) is resolved against
the current KG into an :class:`EditRecord` (all or nothing, :func:`resolve_batch`), appended to the
:class:`EditLog` (fsync before the reply) and applied as the next version of a
:class:`VersionedStore`; a question reads one pinned snapshot from start to end.
"""

from rg.kgedits.config import KGEditsConfig
from rg.kgedits.log import EditLog, EditLogError, LogReport, TornRecord, read_log
from rg.kgedits.model import ById, ByName, EditBatch, EditRecord, EditRejected, Problem, TripleEdit
from rg.kgedits.resolve import affected, parse_tsv, resolve_batch
from rg.kgedits.versioned import EditOrderError, Snapshot, VersionedStore, apply_record

__all__ = ["ById", "ByName", "EditBatch", "EditLog", "EditLogError", "EditOrderError", "EditRecord", "EditRejected",
           "KGEditsConfig", "LogReport", "Problem", "Snapshot", "TornRecord", "TripleEdit", "VersionedStore",
           "affected", "apply_record", "parse_tsv", "read_log", "resolve_batch"]
