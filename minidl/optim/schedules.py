"""Learning-rate schedules: call ``scheduler.step()`` once per epoch (or per step).

Each sets ``optimizer.lr = base_lr * factor(t)`` in closed form after t calls:
- ``StepLR``: factor = gamma^floor(t / step_size)
- ``CosineAnnealingLR``: lr = eta_min + (base - eta_min) (1 + cos(pi t / T)) / 2
  (Loshchilov & Hutter 2017)
- ``LinearWarmup``: factor rises linearly from start_factor to 1 over the first
  ``warmup_steps`` calls (Goyal et al. 2017), then hands over to ``then``, if given.
"""

import math


class LRScheduler:
    """Base: remembers the optimizer's initial lr and the number of ``step()`` calls."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.last_step = 0

    def lr_at(self, t):
        raise NotImplementedError(f"{type(self).__name__}.lr_at")

    def step(self):
        self.last_step += 1
        self.optimizer.lr = self.lr_at(self.last_step)
        return self.optimizer.lr

    def state_dict(self):
        return {"base_lr": self.base_lr, "last_step": self.last_step}

    def load_state_dict(self, state):
        self.base_lr, self.last_step = state["base_lr"], int(state["last_step"])
        self.optimizer.lr = self.lr_at(self.last_step)


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` calls."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}")
        super().__init__(optimizer)
        self.step_size, self.gamma = step_size, gamma

    def lr_at(self, t):
        return self.base_lr * self.gamma ** (t // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the base lr down to ``eta_min`` over ``T_max`` calls."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0):
        if T_max < 1:
            raise ValueError(f"CosineAnnealingLR: T_max must be >= 1, got {T_max}")
        super().__init__(optimizer)
        self.T_max, self.eta_min = T_max, eta_min

    def lr_at(self, t):
        t = min(t, self.T_max)
        return (
            self.eta_min
            + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2
        )


class LinearWarmup(LRScheduler):
    """Ramp the lr linearly up to its base value, then follow ``then`` (shifted by the warm-up)."""

    def __init__(self, optimizer, warmup_steps: int, start_factor: float = 0.1, then=None):
        if warmup_steps < 1 or not 0 < start_factor <= 1:
            raise ValueError("LinearWarmup: warmup_steps must be >= 1 and start_factor in (0, 1]")
        super().__init__(optimizer)
        self.warmup_steps, self.start_factor, self.then = warmup_steps, start_factor, then
        optimizer.lr = self.lr_at(0)

    def lr_at(self, t):
        if t < self.warmup_steps or self.then is None:
            frac = min(t, self.warmup_steps) / self.warmup_steps
            return self.base_lr * (self.start_factor + (1 - self.start_factor) * frac)
        return self.then.lr_at(t - self.warmup_steps)
