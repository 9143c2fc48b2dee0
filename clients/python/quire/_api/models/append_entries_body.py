from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

T = TypeVar("T", bound="AppendEntriesBody")


@_attrs_define
class AppendEntriesBody:
    """
    Attributes:
        entries (list[str]):
    """

    entries: list[str]

    def to_dict(self) -> dict[str, Any]:
        entries = self.entries

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "entries": entries,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        entries = cast(list[str], d.pop("entries"))

        append_entries_body = cls(
            entries=entries,
        )

        return append_entries_body
