from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.ledger_state import LedgerState

if TYPE_CHECKING:
    from ..models.ledger_ensembles_item import LedgerEnsemblesItem
    from ..models.ledger_metadata import LedgerMetadata


T = TypeVar("T", bound="Ledger")


@_attrs_define
class Ledger:
    """
    Example:
        {'ack_quorum': 2, 'created_at_ms': 1765000000000, 'ensemble': 3, 'ensembles': [{'bookies': ['bookie-1',
            'bookie-2', 'bookie-3'], 'first_entry_id': 0}], 'last_entry_id': -1, 'ledger_id': 7, 'length': 0, 'metadata':
            {'app': 'orders'}, 'state': 'open', 'version': 1, 'write_quorum': 3}

    Attributes:
        ack_quorum (int):
        created_at_ms (int):
        ensemble (int):
        ensembles (list[LedgerEnsemblesItem]):
        last_entry_id (int):
        ledger_id (int):
        length (int):
        metadata (LedgerMetadata):
        state (LedgerState):
        version (int):
        write_quorum (int):
    """

    ack_quorum: int
    created_at_ms: int
    ensemble: int
    ensembles: list[LedgerEnsemblesItem]
    last_entry_id: int
    ledger_id: int
    length: int
    metadata: LedgerMetadata
    state: LedgerState
    version: int
    write_quorum: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ack_quorum = self.ack_quorum

        created_at_ms = self.created_at_ms

        ensemble = self.ensemble

        ensembles = []
        for ensembles_item_data in self.ensembles:
            ensembles_item = ensembles_item_data.to_dict()
            ensembles.append(ensembles_item)

        last_entry_id = self.last_entry_id

        ledger_id = self.ledger_id

        length = self.length

        metadata = self.metadata.to_dict()

        state = self.state.value

        version = self.version

        write_quorum = self.write_quorum

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "ack_quorum": ack_quorum,
                "created_at_ms": created_at_ms,
                "ensemble": ensemble,
                "ensembles": ensembles,
                "last_entry_id": last_entry_id,
                "ledger_id": ledger_id,
                "length": length,
                "metadata": metadata,
                "state": state,
                "version": version,
                "write_quorum": write_quorum,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.ledger_ensembles_item import LedgerEnsemblesItem
        from ..models.ledger_metadata import LedgerMetadata

        d = dict(src_dict)
        ack_quorum = d.pop("ack_quorum")

        created_at_ms = d.pop("created_at_ms")

        ensemble = d.pop("ensemble")

        ensembles = []
        _ensembles = d.pop("ensembles")
        for ensembles_item_data in _ensembles:
            ensembles_item = LedgerEnsemblesItem.from_dict(ensembles_item_data)

            ensembles.append(ensembles_item)

        last_entry_id = d.pop("last_entry_id")

        ledger_id = d.pop("ledger_id")

        length = d.pop("length")

        metadata = LedgerMetadata.from_dict(d.pop("metadata"))

        state = LedgerState(d.pop("state"))

        version = d.pop("version")

        write_quorum = d.pop("write_quorum")

        ledger = cls(
            ack_quorum=ack_quorum,
            created_at_ms=created_at_ms,
            ensemble=ensemble,
            ensembles=ensembles,
            last_entry_id=last_entry_id,
            ledger_id=ledger_id,
            length=length,
            metadata=metadata,
            state=state,
            version=version,
            write_quorum=write_quorum,
        )

        ledger.additional_properties = d
        return ledger

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
