"""Protocols: simulate honest clients and produce (Observation, Knowledge, GroundTruth)."""
