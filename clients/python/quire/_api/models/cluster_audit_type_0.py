from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ClusterAuditType0")


@_attrs_define
class ClusterAuditType0:
    """the active auditor's last report

    Attributes:
        at_ms (int | Unset):
        auditor (str | Unset):
        draining_bookies (list[str] | Unset):
        entries_checked (int | Unset):
        entries_corrupt (int | Unset):
        entries_missing (int | Unset):
        ledgers_checked (int | Unset):
        ledgers_marked (int | Unset):
        lost_bookies (list[str] | Unset):
        replica_check_at_ms (int | Unset): when the last complete replica check ended (every bookie it had to ask
            answered); 0: none yet
        replica_check_started_at_ms (int | Unset): when that check began: damage done before it was looked for
        replica_check_unreached (list[str] | Unset): bookies the check under way has not reached yet (asked again every
            pass); the check is not complete until they answer
        retired_bookies (list[str] | Unset):
    """

    at_ms: int | Unset = UNSET
    auditor: str | Unset = UNSET
    draining_bookies: list[str] | Unset = UNSET
    entries_checked: int | Unset = UNSET
    entries_corrupt: int | Unset = UNSET
    entries_missing: int | Unset = UNSET
    ledgers_checked: int | Unset = UNSET
    ledgers_marked: int | Unset = UNSET
    lost_bookies: list[str] | Unset = UNSET
    replica_check_at_ms: int | Unset = UNSET
    replica_check_started_at_ms: int | Unset = UNSET
    replica_check_unreached: list[str] | Unset = UNSET
    retired_bookies: list[str] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        at_ms = self.at_ms

        auditor = self.auditor

        draining_bookies: list[str] | Unset = UNSET
        if not isinstance(self.draining_bookies, Unset):
            draining_bookies = self.draining_bookies

        entries_checked = self.entries_checked

        entries_corrupt = self.entries_corrupt

        entries_missing = self.entries_missing

        ledgers_checked = self.ledgers_checked

        ledgers_marked = self.ledgers_marked

        lost_bookies: list[str] | Unset = UNSET
        if not isinstance(self.lost_bookies, Unset):
            lost_bookies = self.lost_bookies

        replica_check_at_ms = self.replica_check_at_ms

        replica_check_started_at_ms = self.replica_check_started_at_ms

        replica_check_unreached: list[str] | Unset = UNSET
        if not isinstance(self.replica_check_unreached, Unset):
            replica_check_unreached = self.replica_check_unreached

        retired_bookies: list[str] | Unset = UNSET
        if not isinstance(self.retired_bookies, Unset):
            retired_bookies = self.retired_bookies

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if at_ms is not UNSET:
            field_dict["at_ms"] = at_ms
        if auditor is not UNSET:
            field_dict["auditor"] = auditor
        if draining_bookies is not UNSET:
            field_dict["draining_bookies"] = draining_bookies
        if entries_checked is not UNSET:
            field_dict["entries_checked"] = entries_checked
        if entries_corrupt is not UNSET:
            field_dict["entries_corrupt"] = entries_corrupt
        if entries_missing is not UNSET:
            field_dict["entries_missing"] = entries_missing
        if ledgers_checked is not UNSET:
            field_dict["ledgers_checked"] = ledgers_checked
        if ledgers_marked is not UNSET:
            field_dict["ledgers_marked"] = ledgers_marked
        if lost_bookies is not UNSET:
            field_dict["lost_bookies"] = lost_bookies
        if replica_check_at_ms is not UNSET:
            field_dict["replica_check_at_ms"] = replica_check_at_ms
        if replica_check_started_at_ms is not UNSET:
            field_dict["replica_check_started_at_ms"] = replica_check_started_at_ms
        if replica_check_unreached is not UNSET:
            field_dict["replica_check_unreached"] = replica_check_unreached
        if retired_bookies is not UNSET:
            field_dict["retired_bookies"] = retired_bookies

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        at_ms = d.pop("at_ms", UNSET)

        auditor = d.pop("auditor", UNSET)

        draining_bookies = cast(list[str], d.pop("draining_bookies", UNSET))

        entries_checked = d.pop("entries_checked", UNSET)

        entries_corrupt = d.pop("entries_corrupt", UNSET)

        entries_missing = d.pop("entries_missing", UNSET)

        ledgers_checked = d.pop("ledgers_checked", UNSET)

        ledgers_marked = d.pop("ledgers_marked", UNSET)

        lost_bookies = cast(list[str], d.pop("lost_bookies", UNSET))

        replica_check_at_ms = d.pop("replica_check_at_ms", UNSET)

        replica_check_started_at_ms = d.pop("replica_check_started_at_ms", UNSET)

        replica_check_unreached = cast(
            list[str], d.pop("replica_check_unreached", UNSET)
        )

        retired_bookies = cast(list[str], d.pop("retired_bookies", UNSET))

        cluster_audit_type_0 = cls(
            at_ms=at_ms,
            auditor=auditor,
            draining_bookies=draining_bookies,
            entries_checked=entries_checked,
            entries_corrupt=entries_corrupt,
            entries_missing=entries_missing,
            ledgers_checked=ledgers_checked,
            ledgers_marked=ledgers_marked,
            lost_bookies=lost_bookies,
            replica_check_at_ms=replica_check_at_ms,
            replica_check_started_at_ms=replica_check_started_at_ms,
            replica_check_unreached=replica_check_unreached,
            retired_bookies=retired_bookies,
        )

        cluster_audit_type_0.additional_properties = d
        return cluster_audit_type_0

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
