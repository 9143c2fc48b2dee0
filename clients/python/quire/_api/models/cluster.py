from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.bookie import Bookie
    from ..models.cluster_audit_type_0 import ClusterAuditType0
    from ..models.cluster_metadata import ClusterMetadata


T = TypeVar("T", bound="Cluster")


@_attrs_define
class Cluster:
    """
    Attributes:
        auditor (None | str):
        bookies (list[Bookie]):
        lost_copies (int): copies of acknowledged entries this gateway's writers sent and no bookie confirmed (their
            ledgers are marked under-replicated)
        metadata (ClusterMetadata):
        under_replicated_ledgers (int):
        audit (ClusterAuditType0 | None | Unset): the active auditor's last report
    """

    auditor: None | str
    bookies: list[Bookie]
    lost_copies: int
    metadata: ClusterMetadata
    under_replicated_ledgers: int
    audit: ClusterAuditType0 | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.cluster_audit_type_0 import ClusterAuditType0

        auditor: None | str
        auditor = self.auditor

        bookies = []
        for bookies_item_data in self.bookies:
            bookies_item = bookies_item_data.to_dict()
            bookies.append(bookies_item)

        lost_copies = self.lost_copies

        metadata = self.metadata.to_dict()

        under_replicated_ledgers = self.under_replicated_ledgers

        audit: dict[str, Any] | None | Unset
        if isinstance(self.audit, Unset):
            audit = UNSET
        elif isinstance(self.audit, ClusterAuditType0):
            audit = self.audit.to_dict()
        else:
            audit = self.audit

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "auditor": auditor,
                "bookies": bookies,
                "lost_copies": lost_copies,
                "metadata": metadata,
                "under_replicated_ledgers": under_replicated_ledgers,
            }
        )
        if audit is not UNSET:
            field_dict["audit"] = audit

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.bookie import Bookie
        from ..models.cluster_audit_type_0 import ClusterAuditType0
        from ..models.cluster_metadata import ClusterMetadata

        d = dict(src_dict)

        def _parse_auditor(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        auditor = _parse_auditor(d.pop("auditor"))

        bookies = []
        _bookies = d.pop("bookies")
        for bookies_item_data in _bookies:
            bookies_item = Bookie.from_dict(bookies_item_data)

            bookies.append(bookies_item)

        lost_copies = d.pop("lost_copies")

        metadata = ClusterMetadata.from_dict(d.pop("metadata"))

        under_replicated_ledgers = d.pop("under_replicated_ledgers")

        def _parse_audit(data: object) -> ClusterAuditType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                audit_type_0 = ClusterAuditType0.from_dict(data)

                return audit_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ClusterAuditType0 | None | Unset, data)

        audit = _parse_audit(d.pop("audit", UNSET))

        cluster = cls(
            auditor=auditor,
            bookies=bookies,
            lost_copies=lost_copies,
            metadata=metadata,
            under_replicated_ledgers=under_replicated_ledgers,
            audit=audit,
        )

        cluster.additional_properties = d
        return cluster

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
