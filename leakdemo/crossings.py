"""The step at which a run's picture crossed 20 or 30 dB, found exactly although only some steps are scored.

The Runner scores a frame every 0.1 s (or less often, where scoring is costly), so a milestone read off the
scored history was known only to that interval: on a GPU, where DLG takes ~110 steps a second, `dlg`'s
"recovered after 0.51 s" could have been any step of the last 0.1 s before it — a fifth of the figure. While a
milestone is still ahead, the Runner keeps a copy of each step it does not score (`Held`); when a scored frame
has crossed, a bisection over the kept steps scores a few of them and returns the first kept step at or above
the milestone whose predecessor is below it, with the time it arrived. That is the step where the PSNR crossed
(the first one, unless the PSNR fell back below and rose again between two scored frames). Once every
milestone is behind, nothing more is kept.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

MAX_BYTES = 64 * 2 ** 20  # kept images beyond this: every other step is dropped (the bisection stays exact to 2)


class Kept(NamedTuple):
    """An unscored step, as the Runner would have scored it: its images copied (an attack may change its
    estimate in place on its next step), `seconds` when it arrived."""
    iteration: int
    seconds: float
    loss: float | torch.Tensor
    images: torch.Tensor
    sample_ids: list[int] | None
    aligned: bool


class Held:
    """The steps since the last scored frame."""

    def __init__(self):
        self.items: list[Kept] = []
        self.bytes = 0

    def offer(self, step, seconds: float) -> None:
        images = step.images.detach().clone()  # on a GPU a copy on the device: no wait for it
        loss = step.loss.detach().clone() if isinstance(step.loss, torch.Tensor) else step.loss
        self.items.append(Kept(step.iteration, seconds, loss, images, step.sample_ids, step.aligned))
        self.bytes += images.numel() * images.element_size()
        if self.bytes > MAX_BYTES and len(self.items) > 1:
            self.items = self.items[::-2][::-1]  # every other one, counted back from the newest (kept)
            self.bytes = sum(kept.images.numel() * kept.images.element_size() for kept in self.items)

    def clear(self) -> None:
        self.items, self.bytes = [], 0

    def crossings(self, thresholds: list[float], score_of: Callable[[Kept], dict]) -> list[tuple[Kept, dict]]:
        """For each threshold the frame just scored reached (and the one scored before it had not), the
        kept step where the PSNR crossed it — nothing where the frame just scored is that step. `score_of(kept)`
        scores a kept step (metrics.score's dict); each is scored at most once. Returns (step, its score) for
        the steps found, oldest first, no repeats."""
        known: dict[int, dict] = {}

        def psnr(i: int) -> float:
            if i not in known:
                known[i] = score_of(self.items[i])
            return known[i]["psnr"]

        found = set()
        for db in thresholds:
            below, above = -1, len(self.items)  # the last scored frame is below db, the one just scored above
            while above - below > 1:
                mid = (below + above) // 2
                if psnr(mid) >= db:
                    above = mid
                else:
                    below = mid
            if above < len(self.items):
                found.add(above)
        return [(self.items[i], known[i]) for i in sorted(found)]
