from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.bookie_detail_state import BookieDetailState

T = TypeVar("T", bound="BookieDetail")


@_attrs_define
class BookieDetail:
    """
    Attributes:
        address (str):
        decommission_requested_at_ms (int):
        free_disk_bytes (int):
        id (str):
        instance_id (str):
        ledgers (int):
        rack (str):
        registered (bool):
        state (BookieDetailState):
        total_disk_bytes (int):
        under_replicated_ledgers (int):
    """

    address: str
    decommission_requested_at_ms: int
    free_disk_bytes: int
    id: str
    instance_id: str
    ledgers: int
    rack: str
    registered: bool
    state: BookieDetailState
    total_disk_bytes: int
    under_replicated_ledgers: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        address = self.address

        decommission_requested_at_ms = self.decommission_requested_at_ms

        free_disk_bytes = self.free_disk_bytes

        id = self.id

        instance_id = self.instance_id

        ledgers = self.ledgers

        rack = self.rack

        registered = self.registered

        state = self.state.value

        total_disk_bytes = self.total_disk_bytes

        under_replicated_ledgers = self.under_replicated_ledgers

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "address": address,
                "decommission_requested_at_ms": decommission_requested_at_ms,
                "free_disk_bytes": free_disk_bytes,
                "id": id,
                "instance_id": instance_id,
                "ledgers": ledgers,
                "rack": rack,
                "registered": registered,
                "state": state,
                "total_disk_bytes": total_disk_bytes,
                "under_replicated_ledgers": under_replicated_ledgers,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        address = d.pop("address")

        decommission_requested_at_ms = d.pop("decommission_requested_at_ms")

        free_disk_bytes = d.pop("free_disk_bytes")

        id = d.pop("id")

        instance_id = d.pop("instance_id")

        ledgers = d.pop("ledgers")

        rack = d.pop("rack")

        registered = d.pop("registered")

        state = BookieDetailState(d.pop("state"))

        total_disk_bytes = d.pop("total_disk_bytes")

        under_replicated_ledgers = d.pop("under_replicated_ledgers")

        bookie_detail = cls(
            address=address,
            decommission_requested_at_ms=decommission_requested_at_ms,
            free_disk_bytes=free_disk_bytes,
            id=id,
            instance_id=instance_id,
            ledgers=ledgers,
            rack=rack,
            registered=registered,
            state=state,
            total_disk_bytes=total_disk_bytes,
            under_replicated_ledgers=under_replicated_ledgers,
        )

        bookie_detail.additional_properties = d
        return bookie_detail

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
