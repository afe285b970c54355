"""An exception as records carry it, within a process and across processes (JSON): its type's name and its message.
Only front ends word it (frontends/wording.py: `failure_text`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    kind: str  # the exception's type's name: "OSError"
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(type(exc).__name__, str(exc))

    @classmethod
    def from_json(cls, data: object) -> Failure:
        """What `to_json` wrote; anything else (a record cut short, another version's) as a message alone."""
        if isinstance(data, dict):
            return cls(str(data.get("kind", "")), str(data.get("message", "")))
        return cls("", str(data))

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}
