from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.put_cursor_body_from import PutCursorBodyFrom
from ..types import UNSET, Unset

T = TypeVar("T", bound="PutCursorBody")


@_attrs_define
class PutCursorBody:
    """from or position, not both (neither: start; a null position or holds_retention is absent); holds_retention only at
    creation

        Attributes:
            from_ (PutCursorBodyFrom | Unset):
            holds_retention (bool | None | Unset):
            position (int | None | Unset):
    """

    from_: PutCursorBodyFrom | Unset = UNSET
    holds_retention: bool | None | Unset = UNSET
    position: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from_: str | Unset = UNSET
        if not isinstance(self.from_, Unset):
            from_ = self.from_.value

        holds_retention: bool | None | Unset
        if isinstance(self.holds_retention, Unset):
            holds_retention = UNSET
        else:
            holds_retention = self.holds_retention

        position: int | None | Unset
        if isinstance(self.position, Unset):
            position = UNSET
        else:
            position = self.position

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if from_ is not UNSET:
            field_dict["from"] = from_
        if holds_retention is not UNSET:
            field_dict["holds_retention"] = holds_retention
        if position is not UNSET:
            field_dict["position"] = position

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        _from_ = d.pop("from", UNSET)
        from_: PutCursorBodyFrom | Unset
        if isinstance(_from_, Unset):
            from_ = UNSET
        else:
            from_ = PutCursorBodyFrom(_from_)

        def _parse_holds_retention(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        holds_retention = _parse_holds_retention(d.pop("holds_retention", UNSET))

        def _parse_position(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        position = _parse_position(d.pop("position", UNSET))

        put_cursor_body = cls(
            from_=from_,
            holds_retention=holds_retention,
            position=position,
        )

        return put_cursor_body
