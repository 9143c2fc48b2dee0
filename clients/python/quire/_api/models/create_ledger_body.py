from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.create_ledger_body_metadata_type_0 import (
        CreateLedgerBodyMetadataType0,
    )


T = TypeVar("T", bound="CreateLedgerBody")


@_attrs_define
class CreateLedgerBody:
    """
    Attributes:
        ack_quorum (int | None | Unset): copies acknowledged before an append is, at most write_quorum (default 2); null
            or absent: the default
        ensemble (int | None | Unset): bookies the ledger is striped over (default 3); null or absent: the default
        metadata (CreateLedgerBodyMetadataType0 | None | Unset): the ledger's own key-value pairs (not quire.*); null or
            absent: none
        write_quorum (int | None | Unset): copies of each entry, at most ensemble (default 3); null or absent: the
            default
    """

    ack_quorum: int | None | Unset = UNSET
    ensemble: int | None | Unset = UNSET
    metadata: CreateLedgerBodyMetadataType0 | None | Unset = UNSET
    write_quorum: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.create_ledger_body_metadata_type_0 import (
            CreateLedgerBodyMetadataType0,
        )

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

        metadata: dict[str, Any] | None | Unset
        if isinstance(self.metadata, Unset):
            metadata = UNSET
        elif isinstance(self.metadata, CreateLedgerBodyMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        write_quorum: int | None | Unset
        if isinstance(self.write_quorum, Unset):
            write_quorum = UNSET
        else:
            write_quorum = self.write_quorum

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if ack_quorum is not UNSET:
            field_dict["ack_quorum"] = ack_quorum
        if ensemble is not UNSET:
            field_dict["ensemble"] = ensemble
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if write_quorum is not UNSET:
            field_dict["write_quorum"] = write_quorum

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.create_ledger_body_metadata_type_0 import (
            CreateLedgerBodyMetadataType0,
        )

        d = dict(src_dict)

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

        def _parse_metadata(
            data: object,
        ) -> CreateLedgerBodyMetadataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = CreateLedgerBodyMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CreateLedgerBodyMetadataType0 | None | Unset, data)

        metadata = _parse_metadata(d.pop("metadata", UNSET))

        def _parse_write_quorum(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        write_quorum = _parse_write_quorum(d.pop("write_quorum", UNSET))

        create_ledger_body = cls(
            ack_quorum=ack_quorum,
            ensemble=ensemble,
            metadata=metadata,
            write_quorum=write_quorum,
        )

        return create_ledger_body
