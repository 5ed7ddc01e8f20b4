"""Old command names the contract keeps working: `python -m bot.doctor` (now jobs/doctor.py)."""
