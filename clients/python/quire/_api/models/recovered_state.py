from enum import StrEnum


class RecoveredState(StrEnum):
    CLOSED = "closed"
    IN_RECOVERY = "in_recovery"
    OPEN = "open"

    def __str__(self) -> str:
        return str(self.value)
