from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.recovered_state import RecoveredState

if TYPE_CHECKING:
    from ..models.recovered_ensembles_item import RecoveredEnsemblesItem
    from ..models.recovered_metadata import RecoveredMetadata
    from ..models.recovered_recovery import RecoveredRecovery


T = TypeVar("T", bound="Recovered")


@_attrs_define
class Recovered:
    """
    Attributes:
        ack_quorum (int):
        created_at_ms (int):
        ensemble (int):
        ensembles (list[RecoveredEnsemblesItem]):
        last_entry_id (int):
        ledger_id (int):
        length (int):
        metadata (RecoveredMetadata):
        recovery (RecoveredRecovery):
        state (RecoveredState):
        version (int):
        write_quorum (int):
    """

    ack_quorum: int
    created_at_ms: int
    ensemble: int
    ensembles: list[RecoveredEnsemblesItem]
    last_entry_id: int
    ledger_id: int
    length: int
    metadata: RecoveredMetadata
    recovery: RecoveredRecovery
    state: RecoveredState
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

        recovery = self.recovery.to_dict()

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
                "recovery": recovery,
                "state": state,
                "version": version,
                "write_quorum": write_quorum,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.recovered_ensembles_item import RecoveredEnsemblesItem
        from ..models.recovered_metadata import RecoveredMetadata
        from ..models.recovered_recovery import RecoveredRecovery

        d = dict(src_dict)
        ack_quorum = d.pop("ack_quorum")

        created_at_ms = d.pop("created_at_ms")

        ensemble = d.pop("ensemble")

        ensembles = []
        _ensembles = d.pop("ensembles")
        for ensembles_item_data in _ensembles:
            ensembles_item = RecoveredEnsemblesItem.from_dict(ensembles_item_data)

            ensembles.append(ensembles_item)

        last_entry_id = d.pop("last_entry_id")

        ledger_id = d.pop("ledger_id")

        length = d.pop("length")

        metadata = RecoveredMetadata.from_dict(d.pop("metadata"))

        recovery = RecoveredRecovery.from_dict(d.pop("recovery"))

        state = RecoveredState(d.pop("state"))

        version = d.pop("version")

        write_quorum = d.pop("write_quorum")

        recovered = cls(
            ack_quorum=ack_quorum,
            created_at_ms=created_at_ms,
            ensemble=ensemble,
            ensembles=ensembles,
            last_entry_id=last_entry_id,
            ledger_id=ledger_id,
            length=length,
            metadata=metadata,
            recovery=recovery,
            state=state,
            version=version,
            write_quorum=write_quorum,
        )

        recovered.additional_properties = d
        return recovered

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
