"""Timers: wake-ups nobody typed (follow-ups the model sets, a chat's daily digest, a topic's quiet triage).

In: timers added by the follow-up tool, the digest schedule and the triage buffer; the service clock.
Out: due timers pushed as `timer` events into their routes' inboxes (scheduler, in the sweeper), and what a
timer run does when its event comes up — an ordinary run, leased, retried and dead-lettered (fire).
"""

from timers.followup import run_key
from timers.model import TRIAGE, Timer, triage_id
from timers.settings import TimerSettings, timer_settings
from timers.store import Timers, timers_of

# What other features may use of timers (tests/test_layout.py).
__all__ = ["TRIAGE", "Timer", "TimerSettings", "Timers", "run_key", "timer_settings", "timers_of", "triage_id"]
