"""Bounded exponential backoff with jitter, for loops that retry the API server.

The pause doubles after each failure up to a ceiling: a short outage is noticed
within a second, a long one costs one request per `max_delay_s` instead of a
storm, and no component notices the API server's return later than that. Each
pause is stretched by a random factor, so replicas that failed together (every
node's plugin after an API server restart) drift apart instead of retrying in
step; the ceiling is applied last, so it holds whatever the factor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffSettings:
    first_delay_s: float = 0.5
    """The pause after the first failure."""

    max_delay_s: float = 30.0
    """The longest pause: the most a component lags behind the API server's return."""

    jitter: float = 0.5
    """Each pause is stretched by a random factor in [1, 1 + jitter] (then capped)."""


class Backoff:
    """The pauses of one retry loop; `reset()` after a success."""

    def __init__(
        self,
        settings: BackoffSettings,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.settings = settings
        self._uniform = uniform
        self._base = settings.first_delay_s

    def next_delay(self) -> float:
        """The pause before the next try; the one after it is twice as long."""
        stretched = self._base * self._uniform(1.0, 1.0 + self.settings.jitter)
        self._base = min(self._base * 2, self.settings.max_delay_s)
        return min(stretched, self.settings.max_delay_s)

    def reset(self) -> None:
        self._base = self.settings.first_delay_s
