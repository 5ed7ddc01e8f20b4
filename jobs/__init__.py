"""Per-route runs on RQ: the inbox/lease protocol, the drain job, the turn, the outbox, the sweeper."""

from core import boot

boot.importing()  # `python -m jobs.…` / `bot.…` starting: see core/boot.py
