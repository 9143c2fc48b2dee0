"""Contains all the data models used in inputs/outputs"""

from .ack_cursor_body import AckCursorBody
from .append_entries_body import AppendEntriesBody
from .append_records_body import AppendRecordsBody
from .appended import Appended
from .appended_batch import AppendedBatch
from .bookie import Bookie
from .bookie_detail import BookieDetail
from .bookie_detail_state import BookieDetailState
from .bookie_list import BookieList
from .bookie_state import BookieState
from .cluster import Cluster
from .cluster_audit_type_0 import ClusterAuditType0
from .cluster_metadata import ClusterMetadata
from .cluster_metadata_voters_item import ClusterMetadataVotersItem
from .create_ledger_body import CreateLedgerBody
from .create_ledger_body_metadata_type_0 import CreateLedgerBodyMetadataType0
from .create_log_body import CreateLogBody
from .create_log_body_retention_type_0 import CreateLogBodyRetentionType0
from .create_log_body_rollover_type_0 import CreateLogBodyRolloverType0
from .cursor import Cursor
from .entries import Entries
from .entries_entries_item import EntriesEntriesItem
from .error import Error
from .lac import Lac
from .ledger import Ledger
from .ledger_ensembles_item import LedgerEnsemblesItem
from .ledger_list import LedgerList
from .ledger_metadata import LedgerMetadata
from .ledger_state import LedgerState
from .log import Log
from .log_appended import LogAppended
from .log_appended_batch import LogAppendedBatch
from .log_ledgers_item import LogLedgersItem
from .log_list import LogList
from .log_records import LogRecords
from .log_records_records_item import LogRecordsRecordsItem
from .log_retention import LogRetention
from .log_rollover import LogRollover
from .precondition_failed import PreconditionFailed
from .put_cursor_body import PutCursorBody
from .put_cursor_body_from import PutCursorBodyFrom
from .recovered import Recovered
from .recovered_ensembles_item import RecoveredEnsemblesItem
from .recovered_metadata import RecoveredMetadata
from .recovered_recovery import RecoveredRecovery
from .recovered_state import RecoveredState
from .status import Status
from .trim_log_body import TrimLogBody

__all__ = (
    "AckCursorBody",
    "AppendEntriesBody",
    "AppendRecordsBody",
    "Appended",
    "AppendedBatch",
    "Bookie",
    "BookieDetail",
    "BookieDetailState",
    "BookieList",
    "BookieState",
    "Cluster",
    "ClusterAuditType0",
    "ClusterMetadata",
    "ClusterMetadataVotersItem",
    "CreateLedgerBody",
    "CreateLedgerBodyMetadataType0",
    "CreateLogBody",
    "CreateLogBodyRetentionType0",
    "CreateLogBodyRolloverType0",
    "Cursor",
    "Entries",
    "EntriesEntriesItem",
    "Error",
    "Lac",
    "Ledger",
    "LedgerEnsemblesItem",
    "LedgerList",
    "LedgerMetadata",
    "LedgerState",
    "Log",
    "LogAppended",
    "LogAppendedBatch",
    "LogLedgersItem",
    "LogList",
    "LogRecords",
    "LogRecordsRecordsItem",
    "LogRetention",
    "LogRollover",
    "PreconditionFailed",
    "PutCursorBody",
    "PutCursorBodyFrom",
    "Recovered",
    "RecoveredEnsemblesItem",
    "RecoveredMetadata",
    "RecoveredRecovery",
    "RecoveredState",
    "Status",
    "TrimLogBody",
)
