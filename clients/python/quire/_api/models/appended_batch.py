from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="AppendedBatch")


@_attrs_define
class AppendedBatch:
    """
    Example:
        {'first_entry_id': 12, 'last_entry_id': 13}

    Attributes:
        first_entry_id (int):
        last_entry_id (int):
    """

    first_entry_id: int
    last_entry_id: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        first_entry_id = self.first_entry_id

        last_entry_id = self.last_entry_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "first_entry_id": first_entry_id,
                "last_entry_id": last_entry_id,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        first_entry_id = d.pop("first_entry_id")

        last_entry_id = d.pop("last_entry_id")

        appended_batch = cls(
            first_entry_id=first_entry_id,
            last_entry_id=last_entry_id,
        )

        appended_batch.additional_properties = d
        return appended_batch

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
