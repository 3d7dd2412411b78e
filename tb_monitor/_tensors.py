"""Tensors as values, read back off the training thread so the caller never syncs with a device.

``Stat.add`` and ``put_metric`` accept a one-element torch tensor (any device, any real dtype,
with or without ``requires_grad``). On the caller's thread a tensor is only checked (its shape
and dtype are metadata: no device access) and kept, detached; the Stat's timer thread or the
writer thread later reads a whole batch back with one copy (``resolve``), waiting for the work
that produced the values there, not in the training loop.

torch is never imported here: a tensor can only exist once the user imported torch, so finding
``torch`` in ``sys.modules`` is the cheap test.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["checked", "is_tensor", "resolve"]


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def checked(value: Any, what: str) -> Any:
    """``value`` detached, or a ValueError/TypeError naming ``what`` when it is not one real
    number: more than one element, or a complex dtype."""
    if value.numel() != 1:
        raise ValueError(
            f"{what}: a tensor value must hold one element, got shape {tuple(value.shape)}"
        )
    if value.is_complex():
        raise TypeError(f"{what}: a tensor value must be real, got dtype {value.dtype}")
    return value.detach()


def resolve(values: list[Any]) -> list[float]:
    """``values`` (floats and one-element tensors) as floats, with one copy per device.

    Blocks until the devices have produced the tensors: call it off the training thread.
    """
    torch = sys.modules.get("torch")
    out: list[Any] = list(values)
    by_device: dict[Any, list[int]] = {}
    for index, value in enumerate(values):
        if torch is not None and isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(index)
    for indices in by_device.values():
        stacked = torch.stack([values[i].reshape(()).to(torch.float64) for i in indices])
        for i, number in zip(indices, stacked.cpu().tolist(), strict=True):
            out[i] = float(number)
    return out
