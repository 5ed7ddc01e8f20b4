"""Quiet triage: the slow path behind a cheap filter, for topics linked to items in opted-in chats.

In: unaddressed topic messages the web keeps (buffer); a triage timer per topic and quiet period.
Out: one small-model decision per period — quiet, a note, or a proposal through the approval card — at most
one unasked message per topic per post period (run).
"""
