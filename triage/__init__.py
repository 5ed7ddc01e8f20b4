"""Quiet triage: the slow path behind a cheap filter, for topics linked to items in opted-in chats.

In: unaddressed topic messages the web keeps (buffer); a triage timer per topic and quiet period.
Out: one small-model decision per period — quiet, a note, or a proposal through the approval card — at most
one unasked message per topic per post period (run). Another feature may hand it a message of its own (a comment
from a code platform) through `keep`, as the web hands it an overheard one.
"""

from triage.buffer import keep
from triage.settings import TriageSettings, triage_settings

# What other features may use of triage (tests/test_layout.py).
__all__ = ["TriageSettings", "keep", "triage_settings"]
