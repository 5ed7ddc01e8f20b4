"""Fault-injection suite: the real service under kills, outages, faults, fuzzing and load (`make chaos`)."""
