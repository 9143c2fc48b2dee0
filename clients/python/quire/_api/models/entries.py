from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.entries_entries_item import EntriesEntriesItem


T = TypeVar("T", bound="Entries")


@_attrs_define
class Entries:
    """
    Example:
        {'entries': [{'data': 'aGVsbG8=', 'entry_id': 0}, {'data': 'd29ybGQ=', 'entry_id': 1}]}

    Attributes:
        entries (list[EntriesEntriesItem]):
    """

    entries: list[EntriesEntriesItem]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        entries = []
        for entries_item_data in self.entries:
            entries_item = entries_item_data.to_dict()
            entries.append(entries_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "entries": entries,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.entries_entries_item import EntriesEntriesItem

        d = dict(src_dict)
        entries = []
        _entries = d.pop("entries")
        for entries_item_data in _entries:
            entries_item = EntriesEntriesItem.from_dict(entries_item_data)

            entries.append(entries_item)

        entries = cls(
            entries=entries,
        )

        entries.additional_properties = d
        return entries

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
