from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="LogRollover")


@_attrs_define
class LogRollover:
    """
    Attributes:
        max_age_ms (int):
        max_bytes (int):
        max_entries (int):
    """

    max_age_ms: int
    max_bytes: int
    max_entries: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        max_age_ms = self.max_age_ms

        max_bytes = self.max_bytes

        max_entries = self.max_entries

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "max_age_ms": max_age_ms,
                "max_bytes": max_bytes,
                "max_entries": max_entries,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        max_age_ms = d.pop("max_age_ms")

        max_bytes = d.pop("max_bytes")

        max_entries = d.pop("max_entries")

        log_rollover = cls(
            max_age_ms=max_age_ms,
            max_bytes=max_bytes,
            max_entries=max_entries,
        )

        log_rollover.additional_properties = d
        return log_rollover

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
