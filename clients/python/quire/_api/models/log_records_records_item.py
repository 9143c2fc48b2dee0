from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="LogRecordsRecordsItem")


@_attrs_define
class LogRecordsRecordsItem:
    """
    Attributes:
        data (str):
        offset (int):
        time_ms (int): when its writer took it, in milliseconds since the Unix epoch: never less than an earlier
            record's (0: written before records had a time)
        producer_id (str | Unset):
        sequence (int | Unset):
    """

    data: str
    offset: int
    time_ms: int
    producer_id: str | Unset = UNSET
    sequence: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = self.data

        offset = self.offset

        time_ms = self.time_ms

        producer_id = self.producer_id

        sequence = self.sequence

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "data": data,
                "offset": offset,
                "time_ms": time_ms,
            }
        )
        if producer_id is not UNSET:
            field_dict["producer_id"] = producer_id
        if sequence is not UNSET:
            field_dict["sequence"] = sequence

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        data = d.pop("data")

        offset = d.pop("offset")

        time_ms = d.pop("time_ms")

        producer_id = d.pop("producer_id", UNSET)

        sequence = d.pop("sequence", UNSET)

        log_records_records_item = cls(
            data=data,
            offset=offset,
            time_ms=time_ms,
            producer_id=producer_id,
            sequence=sequence,
        )

        log_records_records_item.additional_properties = d
        return log_records_records_item

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
