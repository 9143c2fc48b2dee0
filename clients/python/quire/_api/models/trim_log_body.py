from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="TrimLogBody")


@_attrs_define
class TrimLogBody:
    """
    Attributes:
        before (int):
    """

    before: int

    def to_dict(self) -> dict[str, Any]:
        before = self.before

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "before": before,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        before = d.pop("before")

        trim_log_body = cls(
            before=before,
        )

        return trim_log_body
