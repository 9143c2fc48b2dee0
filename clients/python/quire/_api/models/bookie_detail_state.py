from enum import StrEnum


class BookieDetailState(StrEnum):
    AVAILABLE = "available"
    DECOMMISSIONED = "decommissioned"
    DECOMMISSIONING = "decommissioning"
    READ_ONLY = "read_only"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return str(self.value)
