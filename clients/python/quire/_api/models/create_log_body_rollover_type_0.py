from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="CreateLogBodyRolloverType0")


@_attrs_define
class CreateLogBodyRolloverType0:
    """roll to a new ledger at the first limit reached (0: none; absent: the default)

    Attributes:
        max_age_ms (int | None | Unset): a ledger's age at most (0: no limit; null or absent: the default)
        max_bytes (int | None | Unset): payload bytes per ledger at most (0: no limit; null or absent: the default)
        max_entries (int | None | Unset): records per ledger at most (0: no limit; null or absent: the default)
    """

    max_age_ms: int | None | Unset = UNSET
    max_bytes: int | None | Unset = UNSET
    max_entries: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        max_age_ms: int | None | Unset
        if isinstance(self.max_age_ms, Unset):
            max_age_ms = UNSET
        else:
            max_age_ms = self.max_age_ms

        max_bytes: int | None | Unset
        if isinstance(self.max_bytes, Unset):
            max_bytes = UNSET
        else:
            max_bytes = self.max_bytes

        max_entries: int | None | Unset
        if isinstance(self.max_entries, Unset):
            max_entries = UNSET
        else:
            max_entries = self.max_entries

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_age_ms is not UNSET:
            field_dict["max_age_ms"] = max_age_ms
        if max_bytes is not UNSET:
            field_dict["max_bytes"] = max_bytes
        if max_entries is not UNSET:
            field_dict["max_entries"] = max_entries

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_max_age_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_age_ms = _parse_max_age_ms(d.pop("max_age_ms", UNSET))

        def _parse_max_bytes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_bytes = _parse_max_bytes(d.pop("max_bytes", UNSET))

        def _parse_max_entries(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_entries = _parse_max_entries(d.pop("max_entries", UNSET))

        create_log_body_rollover_type_0 = cls(
            max_age_ms=max_age_ms,
            max_bytes=max_bytes,
            max_entries=max_entries,
        )

        return create_log_body_rollover_type_0
