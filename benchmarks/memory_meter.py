"""A process's memory above a base, for the memory probes (``loss_memory.py``,
``activation_memory.py``): the resident memory on a CPU (Linux ``/proc/self/status``; its peak
reset through ``/proc/self/clear_refs``), CUDA's allocated bytes on a GPU."""

from __future__ import annotations


def _status_bytes(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


class MemoryMeter:
    """Bytes live and the peak since :meth:`start` (or :meth:`restart_peak`), over the bytes at
    :meth:`start`; ``device`` is ``cpu`` or ``cuda``."""

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self.cuda = device == "cuda"
        self.torch = torch
        self.base = 0.0

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self) -> None:
        """The base: what is allocated now; the peak starts from here."""
        self._sync()
        self.base = float(self.torch.cuda.memory_allocated()) if self.cuda else _status_bytes("VmRSS:")
        self.restart_peak()

    def restart_peak(self) -> None:
        """A new peak from here, over the same base."""
        self._sync()
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()
        else:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")

    def live(self) -> float:
        """Bytes allocated now beyond the base."""
        self._sync()
        return (float(self.torch.cuda.memory_allocated()) if self.cuda else _status_bytes("VmRSS:")) - self.base

    def peak(self) -> float:
        """The peak beyond the base since :meth:`start` or :meth:`restart_peak`."""
        self._sync()
        return (float(self.torch.cuda.max_memory_allocated()) if self.cuda else _status_bytes("VmHWM:")) - self.base
