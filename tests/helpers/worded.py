"""Records the wording tests word (tests/frontends/test_wording.py, test_event_wording.py): a template that does not
fit, the places a command looks in, and versions skipped as incompatible or signed with another team's secret."""

from __future__ import annotations

from jupyter_compile_cache.kernels.protocol import TemplateProblem, TemplateTrouble
from jupyter_compile_cache.storage import sources
from jupyter_compile_cache.storage.bundle import FieldMismatch

OMP_DIFFERS = TemplateProblem(TemplateTrouble.VARIABLE_DIFFERS, "OMP_NUM_THREADS")
IDLE = TemplateProblem(TemplateTrouble.IDLE)
LOCAL = sources.Place("local", "/s")
HUB = sources.Place("hub", "redis://h:1/0")
TORCH_DIFFERS = (FieldMismatch("torch", "2.9", "2.13"),)
INCOMPATIBLE = sources.Skip("v1", LOCAL, sources.SkipKind.INCOMPATIBLE, mismatches=TORCH_DIFFERS)
SIGNED = sources.Skip("v2", HUB, sources.SkipKind.WRONG_SIGNATURE, "bundle 'net' version v2 has a wrong signature")
