from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="LogAppendedBatch")


@_attrs_define
class LogAppendedBatch:
    """
    Attributes:
        first_offset (int):
        last_offset (int):
        offsets (list[int]):
    """

    first_offset: int
    last_offset: int
    offsets: list[int]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        first_offset = self.first_offset

        last_offset = self.last_offset

        offsets = self.offsets

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "first_offset": first_offset,
                "last_offset": last_offset,
                "offsets": offsets,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        first_offset = d.pop("first_offset")

        last_offset = d.pop("last_offset")

        offsets = cast(list[int], d.pop("offsets"))

        log_appended_batch = cls(
            first_offset=first_offset,
            last_offset=last_offset,
            offsets=offsets,
        )

        log_appended_batch.additional_properties = d
        return log_appended_batch

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
