from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="AckCursorBody")


@_attrs_define
class AckCursorBody:
    """
    Attributes:
        ack (int):
    """

    ack: int

    def to_dict(self) -> dict[str, Any]:
        ack = self.ack

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "ack": ack,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        ack = d.pop("ack")

        ack_cursor_body = cls(
            ack=ack,
        )

        return ack_cursor_body
