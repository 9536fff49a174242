"""Attacks: generators that take (Observation, Knowledge, params, device) and yield Steps."""
