from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="AppendRecordsBody")


@_attrs_define
class AppendRecordsBody:
    """
    Attributes:
        records (list[str]):
        expected_offset (int | None | Unset):
        producer_id (str | Unset):
        sequence (int | Unset):
    """

    records: list[str]
    expected_offset: int | None | Unset = UNSET
    producer_id: str | Unset = UNSET
    sequence: int | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        records = self.records

        expected_offset: int | None | Unset
        if isinstance(self.expected_offset, Unset):
            expected_offset = UNSET
        else:
            expected_offset = self.expected_offset

        producer_id = self.producer_id

        sequence = self.sequence

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "records": records,
            }
        )
        if expected_offset is not UNSET:
            field_dict["expected_offset"] = expected_offset
        if producer_id is not UNSET:
            field_dict["producer_id"] = producer_id
        if sequence is not UNSET:
            field_dict["sequence"] = sequence

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        records = cast(list[str], d.pop("records"))

        def _parse_expected_offset(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        expected_offset = _parse_expected_offset(d.pop("expected_offset", UNSET))

        producer_id = d.pop("producer_id", UNSET)

        sequence = d.pop("sequence", UNSET)

        append_records_body = cls(
            records=records,
            expected_offset=expected_offset,
            producer_id=producer_id,
            sequence=sequence,
        )

        return append_records_body
