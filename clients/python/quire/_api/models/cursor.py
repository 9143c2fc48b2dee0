from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Cursor")


@_attrs_define
class Cursor:
    """
    Example:
        {'holds_retention': True, 'name': 'billing', 'position': 44, 'updated_at_ms': 1765000000200, 'version': 3}

    Attributes:
        holds_retention (bool):
        name (str):
        position (int):
        updated_at_ms (int):
        version (int):
    """

    holds_retention: bool
    name: str
    position: int
    updated_at_ms: int
    version: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        holds_retention = self.holds_retention

        name = self.name

        position = self.position

        updated_at_ms = self.updated_at_ms

        version = self.version

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "holds_retention": holds_retention,
                "name": name,
                "position": position,
                "updated_at_ms": updated_at_ms,
                "version": version,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        holds_retention = d.pop("holds_retention")

        name = d.pop("name")

        position = d.pop("position")

        updated_at_ms = d.pop("updated_at_ms")

        version = d.pop("version")

        cursor = cls(
            holds_retention=holds_retention,
            name=name,
            position=position,
            updated_at_ms=updated_at_ms,
            version=version,
        )

        cursor.additional_properties = d
        return cursor

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
