from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="RecoveredRecovery")


@_attrs_define
class RecoveredRecovery:
    """
    Attributes:
        fence_us (int | None):
        fenced (bool):
        total_us (int):
    """

    fence_us: int | None
    fenced: bool
    total_us: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        fence_us: int | None
        fence_us = self.fence_us

        fenced = self.fenced

        total_us = self.total_us

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "fence_us": fence_us,
                "fenced": fenced,
                "total_us": total_us,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_fence_us(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fence_us = _parse_fence_us(d.pop("fence_us"))

        fenced = d.pop("fenced")

        total_us = d.pop("total_us")

        recovered_recovery = cls(
            fence_us=fence_us,
            fenced=fenced,
            total_us=total_us,
        )

        recovered_recovery.additional_properties = d
        return recovered_recovery

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
