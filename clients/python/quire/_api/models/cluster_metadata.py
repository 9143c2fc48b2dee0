from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.cluster_metadata_voters_item import ClusterMetadataVotersItem


T = TypeVar("T", bound="ClusterMetadata")


@_attrs_define
class ClusterMetadata:
    """
    Attributes:
        leader_address (str):
        leader_id (int | None):
        term (int):
        voters (list[ClusterMetadataVotersItem]):
    """

    leader_address: str
    leader_id: int | None
    term: int
    voters: list[ClusterMetadataVotersItem]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        leader_address = self.leader_address

        leader_id: int | None
        leader_id = self.leader_id

        term = self.term

        voters = []
        for voters_item_data in self.voters:
            voters_item = voters_item_data.to_dict()
            voters.append(voters_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "leader_address": leader_address,
                "leader_id": leader_id,
                "term": term,
                "voters": voters,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.cluster_metadata_voters_item import ClusterMetadataVotersItem

        d = dict(src_dict)
        leader_address = d.pop("leader_address")

        def _parse_leader_id(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        leader_id = _parse_leader_id(d.pop("leader_id"))

        term = d.pop("term")

        voters = []
        _voters = d.pop("voters")
        for voters_item_data in _voters:
            voters_item = ClusterMetadataVotersItem.from_dict(voters_item_data)

            voters.append(voters_item)

        cluster_metadata = cls(
            leader_address=leader_address,
            leader_id=leader_id,
            term=term,
            voters=voters,
        )

        cluster_metadata.additional_properties = d
        return cluster_metadata

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
