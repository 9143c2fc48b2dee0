from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.create_log_body_retention_type_0 import CreateLogBodyRetentionType0
    from ..models.create_log_body_rollover_type_0 import CreateLogBodyRolloverType0


T = TypeVar("T", bound="CreateLogBody")


@_attrs_define
class CreateLogBody:
    """
    Attributes:
        name (str):
        ack_quorum (int | None | Unset): copies acknowledged before an append is (default 2); null or absent: the
            default
        ensemble (int | None | Unset): bookies each ledger is striped over (default 3); null or absent: the default
        retention (CreateLogBodyRetentionType0 | None | Unset): trim whole ledgers past these (0 or absent: keep)
        rollover (CreateLogBodyRolloverType0 | None | Unset): roll to a new ledger at the first limit reached (0: none;
            absent: the default)
        write_quorum (int | None | Unset): copies of each record (default 3); null or absent: the default
    """

    name: str
    ack_quorum: int | None | Unset = UNSET
    ensemble: int | None | Unset = UNSET
    retention: CreateLogBodyRetentionType0 | None | Unset = UNSET
    rollover: CreateLogBodyRolloverType0 | None | Unset = UNSET
    write_quorum: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.create_log_body_retention_type_0 import (
            CreateLogBodyRetentionType0,
        )
        from ..models.create_log_body_rollover_type_0 import CreateLogBodyRolloverType0

        name = self.name

        ack_quorum: int | None | Unset
        if isinstance(self.ack_quorum, Unset):
            ack_quorum = UNSET
        else:
            ack_quorum = self.ack_quorum

        ensemble: int | None | Unset
        if isinstance(self.ensemble, Unset):
            ensemble = UNSET
        else:
            ensemble = self.ensemble

        retention: dict[str, Any] | None | Unset
        if isinstance(self.retention, Unset):
            retention = UNSET
        elif isinstance(self.retention, CreateLogBodyRetentionType0):
            retention = self.retention.to_dict()
        else:
            retention = self.retention

        rollover: dict[str, Any] | None | Unset
        if isinstance(self.rollover, Unset):
            rollover = UNSET
        elif isinstance(self.rollover, CreateLogBodyRolloverType0):
            rollover = self.rollover.to_dict()
        else:
            rollover = self.rollover

        write_quorum: int | None | Unset
        if isinstance(self.write_quorum, Unset):
            write_quorum = UNSET
        else:
            write_quorum = self.write_quorum

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if ack_quorum is not UNSET:
            field_dict["ack_quorum"] = ack_quorum
        if ensemble is not UNSET:
            field_dict["ensemble"] = ensemble
        if retention is not UNSET:
            field_dict["retention"] = retention
        if rollover is not UNSET:
            field_dict["rollover"] = rollover
        if write_quorum is not UNSET:
            field_dict["write_quorum"] = write_quorum

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.create_log_body_retention_type_0 import (
            CreateLogBodyRetentionType0,
        )
        from ..models.create_log_body_rollover_type_0 import CreateLogBodyRolloverType0

        d = dict(src_dict)
        name = d.pop("name")

        def _parse_ack_quorum(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ack_quorum = _parse_ack_quorum(d.pop("ack_quorum", UNSET))

        def _parse_ensemble(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ensemble = _parse_ensemble(d.pop("ensemble", UNSET))

        def _parse_retention(
            data: object,
        ) -> CreateLogBodyRetentionType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                retention_type_0 = CreateLogBodyRetentionType0.from_dict(data)

                return retention_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CreateLogBodyRetentionType0 | None | Unset, data)

        retention = _parse_retention(d.pop("retention", UNSET))

        def _parse_rollover(data: object) -> CreateLogBodyRolloverType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                rollover_type_0 = CreateLogBodyRolloverType0.from_dict(data)

                return rollover_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CreateLogBodyRolloverType0 | None | Unset, data)

        rollover = _parse_rollover(d.pop("rollover", UNSET))

        def _parse_write_quorum(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        write_quorum = _parse_write_quorum(d.pop("write_quorum", UNSET))

        create_log_body = cls(
            name=name,
            ack_quorum=ack_quorum,
            ensemble=ensemble,
            retention=retention,
            rollover=rollover,
            write_quorum=write_quorum,
        )

        return create_log_body
