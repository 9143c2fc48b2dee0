from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.log_records_records_item import LogRecordsRecordsItem


T = TypeVar("T", bound="LogRecords")


@_attrs_define
class LogRecords:
    """
    Example:
        {'next': 44, 'records': [{'data': 'aGVsbG8=', 'offset': 42, 'producer_id': 'orders-service-1', 'sequence': 7,
            'time_ms': 1765000000123}, {'data': 'd29ybGQ=', 'offset': 43, 'time_ms': 1765000000125}]}

    Attributes:
        next_ (int):
        records (list[LogRecordsRecordsItem]):
    """

    next_: int
    records: list[LogRecordsRecordsItem]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        next_ = self.next_

        records = []
        for records_item_data in self.records:
            records_item = records_item_data.to_dict()
            records.append(records_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "next": next_,
                "records": records,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.log_records_records_item import LogRecordsRecordsItem

        d = dict(src_dict)
        next_ = d.pop("next")

        records = []
        _records = d.pop("records")
        for records_item_data in _records:
            records_item = LogRecordsRecordsItem.from_dict(records_item_data)

            records.append(records_item)

        log_records = cls(
            next_=next_,
            records=records,
        )

        log_records.additional_properties = d
        return log_records

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
