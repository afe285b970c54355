"""One attribute of torch replaced by ours, and put back exactly."""

from __future__ import annotations

import contextlib
from typing import Any


class Patch:
    """One attribute of torch replaced by ours; `undo` puts the original back exactly."""

    def __init__(self, owner: Any, name: str, replacement: Any) -> None:
        self.owner, self.name = owner, name
        self.had_own = name in vars(owner)
        # the attribute itself where the owner has it (a classmethod stays one), else what it inherits
        self.original = vars(owner)[name] if self.had_own else getattr(owner, name)
        setattr(owner, name, replacement)

    def undo(self) -> None:
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            with contextlib.suppress(AttributeError):
                delattr(self.owner, self.name)
