"""attnkit's studies: one folder per question, each with its runner, records, rendered tables and README.

The shared record, pairing and verdict code lives in :mod:`studies.stats`.
"""
