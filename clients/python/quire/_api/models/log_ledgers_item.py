from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="LogLedgersItem")


@_attrs_define
class LogLedgersItem:
    """
    Attributes:
        end_offset (int | None):
        first_offset (int):
        ledger_id (int):
        sealed_at_ms (int | Unset):
    """

    end_offset: int | None
    first_offset: int
    ledger_id: int
    sealed_at_ms: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        end_offset: int | None
        end_offset = self.end_offset

        first_offset = self.first_offset

        ledger_id = self.ledger_id

        sealed_at_ms = self.sealed_at_ms

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "end_offset": end_offset,
                "first_offset": first_offset,
                "ledger_id": ledger_id,
            }
        )
        if sealed_at_ms is not UNSET:
            field_dict["sealed_at_ms"] = sealed_at_ms

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_end_offset(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        end_offset = _parse_end_offset(d.pop("end_offset"))

        first_offset = d.pop("first_offset")

        ledger_id = d.pop("ledger_id")

        sealed_at_ms = d.pop("sealed_at_ms", UNSET)

        log_ledgers_item = cls(
            end_offset=end_offset,
            first_offset=first_offset,
            ledger_id=ledger_id,
            sealed_at_ms=sealed_at_ms,
        )

        log_ledgers_item.additional_properties = d
        return log_ledgers_item

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
