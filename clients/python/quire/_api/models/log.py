from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.log_ledgers_item import LogLedgersItem
    from ..models.log_retention import LogRetention
    from ..models.log_rollover import LogRollover


T = TypeVar("T", bound="Log")


@_attrs_define
class Log:
    """
    Example:
        {'ack_quorum': 2, 'created_at_ms': 1765000000000, 'ensemble': 3, 'epoch': 1, 'ledgers': [{'end_offset': None,
            'first_offset': 0, 'ledger_id': 7}], 'name': 'orders', 'owner': 'gateway/1', 'principal': None, 'retention':
            {'max_age_ms': 604800000, 'max_bytes': 0}, 'rollover': {'max_age_ms': 3600000, 'max_bytes': 268435456,
            'max_entries': 100000}, 'trim_before': 0, 'version': 2, 'write_quorum': 3}

    Attributes:
        ack_quorum (int):
        created_at_ms (int):
        ensemble (int):
        epoch (int):
        ledgers (list[LogLedgersItem]):
        name (str):
        owner (str):
        retention (LogRetention):
        rollover (LogRollover):
        trim_before (int):
        version (int):
        write_quorum (int):
        principal (None | str | Unset): the HTTP principal the log was created for: only it may append, trim, take over,
            hold retention or delete through a gateway (null: none recorded)
    """

    ack_quorum: int
    created_at_ms: int
    ensemble: int
    epoch: int
    ledgers: list[LogLedgersItem]
    name: str
    owner: str
    retention: LogRetention
    rollover: LogRollover
    trim_before: int
    version: int
    write_quorum: int
    principal: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ack_quorum = self.ack_quorum

        created_at_ms = self.created_at_ms

        ensemble = self.ensemble

        epoch = self.epoch

        ledgers = []
        for ledgers_item_data in self.ledgers:
            ledgers_item = ledgers_item_data.to_dict()
            ledgers.append(ledgers_item)

        name = self.name

        owner = self.owner

        retention = self.retention.to_dict()

        rollover = self.rollover.to_dict()

        trim_before = self.trim_before

        version = self.version

        write_quorum = self.write_quorum

        principal: None | str | Unset
        if isinstance(self.principal, Unset):
            principal = UNSET
        else:
            principal = self.principal

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "ack_quorum": ack_quorum,
                "created_at_ms": created_at_ms,
                "ensemble": ensemble,
                "epoch": epoch,
                "ledgers": ledgers,
                "name": name,
                "owner": owner,
                "retention": retention,
                "rollover": rollover,
                "trim_before": trim_before,
                "version": version,
                "write_quorum": write_quorum,
            }
        )
        if principal is not UNSET:
            field_dict["principal"] = principal

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.log_ledgers_item import LogLedgersItem
        from ..models.log_retention import LogRetention
        from ..models.log_rollover import LogRollover

        d = dict(src_dict)
        ack_quorum = d.pop("ack_quorum")

        created_at_ms = d.pop("created_at_ms")

        ensemble = d.pop("ensemble")

        epoch = d.pop("epoch")

        ledgers = []
        _ledgers = d.pop("ledgers")
        for ledgers_item_data in _ledgers:
            ledgers_item = LogLedgersItem.from_dict(ledgers_item_data)

            ledgers.append(ledgers_item)

        name = d.pop("name")

        owner = d.pop("owner")

        retention = LogRetention.from_dict(d.pop("retention"))

        rollover = LogRollover.from_dict(d.pop("rollover"))

        trim_before = d.pop("trim_before")

        version = d.pop("version")

        write_quorum = d.pop("write_quorum")

        def _parse_principal(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        principal = _parse_principal(d.pop("principal", UNSET))

        log = cls(
            ack_quorum=ack_quorum,
            created_at_ms=created_at_ms,
            ensemble=ensemble,
            epoch=epoch,
            ledgers=ledgers,
            name=name,
            owner=owner,
            retention=retention,
            rollover=rollover,
            trim_before=trim_before,
            version=version,
            write_quorum=write_quorum,
            principal=principal,
        )

        log.additional_properties = d
        return log

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
