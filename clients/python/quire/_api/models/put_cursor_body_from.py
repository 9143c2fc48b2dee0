from enum import StrEnum


class PutCursorBodyFrom(StrEnum):
    END = "end"
    START = "start"

    def __str__(self) -> str:
        return str(self.value)
