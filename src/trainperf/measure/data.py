"""Training data for the bench: synthetic token ids (default) or byte-level packed real text.

Both are deterministic functions of (seed, step, data-parallel rank, micro-batch index), so a
resumed run reads exactly the batches the uninterrupted run would have read, and every tensor-
parallel rank of one data-parallel group reads the same batch.

* Synthetic: uniform random ids in ``[0, vocab)``; throughput needs no tokenizer. The loss
  stays near ``ln(vocab)`` (nothing to learn).
* Text (``--data PATH``): the UTF-8 files of PATH (a file, or a directory searched
  recursively, files in sorted order) concatenated as raw bytes (tokens 0..255; needs
  ``vocab >= 256``), cut into non-overlapping windows of ``seq_len + 1`` bytes (inputs and
  shifted targets), visited in a fresh seeded permutation each epoch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from trainperf.errors import InputFileError, SpecError

BYTE_VOCAB = 256
_MAX_TEXT_BYTES = 256 << 20
"""Read at most this many bytes (a directory may be huge; 256 MiB is plenty for a benchmark)."""


def text_files(path: str | Path) -> list[Path]:
    """The files to read for ``path``: itself, or every regular file below it, sorted."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        if not files:
            raise InputFileError(f"--data {str(p)!r}: the directory holds no files")
        return files
    raise InputFileError(f"--data {str(p)!r} does not exist")


def read_text_bytes(path: str | Path) -> bytes:
    """The UTF-8 bytes of ``path`` (see :func:`text_files`).

    A single file that is not UTF-8 (or unreadable) is an error; in a directory such files are
    skipped (binary files next to sources are common), and it is an error if none is left.
    """
    files = text_files(path)
    single = len(files) == 1 and Path(path).is_file()
    chunks: list[bytes] = []
    total = 0
    for f in files:
        try:
            raw = f.read_bytes()
            raw.decode("utf-8")
        except OSError as e:
            if single:
                raise InputFileError(f"--data {str(f)!r} cannot be read: {e.strerror or e}") from None
            continue
        except UnicodeDecodeError as e:
            if single:
                raise InputFileError(f"--data {str(f)!r} is not UTF-8 text (byte {e.start})") from None
            continue
        chunks.append(raw)
        total += len(raw)
        if total >= _MAX_TEXT_BYTES:
            break
    if not chunks:
        raise InputFileError(f"--data {str(path)!r}: no readable UTF-8 text file")
    return b"\n".join(chunks)


@dataclass
class TextDataset:
    """Byte tokens of a text corpus cut into ``seq_len + 1`` windows."""

    tokens: torch.Tensor
    """All bytes (uint8, one row per window), trimmed to a whole number of windows."""
    seq_len: int
    source: str

    @classmethod
    def from_path(cls, path: str | Path, seq_len: int, vocab: int) -> TextDataset:
        if vocab < BYTE_VOCAB:
            raise SpecError("model.vocab", vocab, f">= {BYTE_VOCAB} to train on byte-level text (--data)")
        data = read_text_bytes(path)
        window = seq_len + 1
        n = len(data) // window
        if n == 0:
            raise InputFileError(f"--data {str(path)!r} holds {len(data)} bytes, fewer than one sequence "
                                 f"of seq_len+1={window} bytes")
        buf = torch.frombuffer(bytearray(data[: n * window]), dtype=torch.uint8)
        return cls(tokens=buf.view(n, window), seq_len=seq_len, source=str(path))

    @property
    def num_sequences(self) -> int:
        return int(self.tokens.shape[0])

    def sequences(self, indices: list[int], seed: int) -> torch.Tensor:
        """Rows for global sequence indices (epoch-wise seeded permutation)."""
        n = self.num_sequences
        out = []
        perms: dict[int, torch.Tensor] = {}
        for i in indices:
            epoch, j = divmod(i, n)
            if epoch not in perms:
                g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
                perms[epoch] = torch.randperm(n, generator=g)
            out.append(self.tokens[perms[epoch][j]])
        return torch.stack(out).to(torch.int64)


class Batches:
    """Micro-batches of (inputs, targets) for one data-parallel rank.

    Global sequence index of micro-batch ``m`` of step ``s`` on data-parallel rank ``r``::

        s * global_batch + (m * dp_size + r) * micro_batch + [0, micro_batch)

    so ranks and micro-batches tile the global batch without overlap.
    """

    def __init__(self, *, vocab: int, seq_len: int, micro_batch: int, global_batch: int,
                 dp_rank: int, dp_size: int, seed: int, dataset: TextDataset | None = None) -> None:
        self.vocab, self.seq_len, self.micro_batch = vocab, seq_len, micro_batch
        self.global_batch, self.dp_rank, self.dp_size, self.seed = global_batch, dp_rank, dp_size, seed
        self.dataset = dataset

    @property
    def kind(self) -> str:
        return f"text:{self.dataset.source}" if self.dataset is not None else "synthetic"

    def get(self, step: int, micro: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        start = step * self.global_batch + (micro * self.dp_size + self.dp_rank) * self.micro_batch
        if self.dataset is not None:
            rows = self.dataset.sequences(list(range(start, start + self.micro_batch)), self.seed)
        else:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + start) % (2**63 - 1))
            rows = torch.randint(0, self.vocab, (self.micro_batch, self.seq_len + 1), generator=g)
        rows = rows.to(device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]


def stdlib_text_dir() -> str:
    """The Python standard library's source directory (offline real text for tests and demos)."""
    import sysconfig

    return os.fspath(sysconfig.get_paths()["stdlib"])
