"""Local stand-ins for Feishu and Claude, plus event builders, so the bot runs and is tested offline."""

from core import boot

boot.importing()  # `python -m sandbox …` starting: see core/boot.py
