"""How long the simulate tests let a run settle.

Settling is waited for, not timed: a run returns once every pod has settled, so the
limit only bounds a broken run, and a busy machine never fails a healthy one.
"""

PATIENT = ("--timeout", "900")
