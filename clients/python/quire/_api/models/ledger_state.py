from enum import StrEnum


class LedgerState(StrEnum):
    CLOSED = "closed"
    IN_RECOVERY = "in_recovery"
    OPEN = "open"

    def __str__(self) -> str:
        return str(self.value)
