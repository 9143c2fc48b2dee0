from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.bookie_state import BookieState

T = TypeVar("T", bound="Bookie")


@_attrs_define
class Bookie:
    """
    Attributes:
        address (str):
        free_disk_bytes (int):
        id (str):
        instance_id (str):
        rack (str):
        state (BookieState):
        total_disk_bytes (int):
    """

    address: str
    free_disk_bytes: int
    id: str
    instance_id: str
    rack: str
    state: BookieState
    total_disk_bytes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        address = self.address

        free_disk_bytes = self.free_disk_bytes

        id = self.id

        instance_id = self.instance_id

        rack = self.rack

        state = self.state.value

        total_disk_bytes = self.total_disk_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "address": address,
                "free_disk_bytes": free_disk_bytes,
                "id": id,
                "instance_id": instance_id,
                "rack": rack,
                "state": state,
                "total_disk_bytes": total_disk_bytes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        address = d.pop("address")

        free_disk_bytes = d.pop("free_disk_bytes")

        id = d.pop("id")

        instance_id = d.pop("instance_id")

        rack = d.pop("rack")

        state = BookieState(d.pop("state"))

        total_disk_bytes = d.pop("total_disk_bytes")

        bookie = cls(
            address=address,
            free_disk_bytes=free_disk_bytes,
            id=id,
            instance_id=instance_id,
            rack=rack,
            state=state,
            total_disk_bytes=total_disk_bytes,
        )

        bookie.additional_properties = d
        return bookie

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
