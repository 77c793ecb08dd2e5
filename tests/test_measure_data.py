"""Bench data: byte-level packing of real text, determinism, and the errors for unusable files."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainperf.errors import InputFileError, SpecError  # noqa: E402
from trainperf.measure.data import Batches, TextDataset  # noqa: E402

pytestmark = pytest.mark.torch


def test_packs_bytes_into_windows(tmp_path):
    text = "héllo wörld, " * 20  # multi-byte UTF-8 characters become several byte tokens
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    ds = TextDataset.from_path(tmp_path / "a.txt", seq_len=15, vocab=256)
    raw = text.encode("utf-8")
    assert ds.num_sequences == len(raw) // 16
    assert bytes(ds.tokens[0].tolist()) == raw[:16]
    b = Batches(vocab=256, seq_len=15, micro_batch=2, global_batch=4, dp_rank=0, dp_size=2, seed=3, dataset=ds)
    x, y = b.get(0, 0)
    assert x.dtype == torch.int64 and x.shape == (2, 15)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


def test_ranks_and_microbatches_tile_the_global_batch(tmp_path):
    (tmp_path / "t.txt").write_text("".join(f"{i:09d}\n" for i in range(400)))  # 400 distinct windows
    ds = TextDataset.from_path(tmp_path / "t.txt", seq_len=9, vocab=256)
    rows = []
    for rank in range(2):
        b = Batches(vocab=256, seq_len=9, micro_batch=2, global_batch=8, dp_rank=rank, dp_size=2, seed=0,
                    dataset=ds)
        for micro in range(2):
            rows += [tuple(r.tolist()) for r in b.get(5, micro)[0]]
    assert len(rows) == 8 and len(set(rows)) == 8  # 8 distinct sequences, no overlap
    again = Batches(vocab=256, seq_len=9, micro_batch=2, global_batch=8, dp_rank=1, dp_size=2, seed=0, dataset=ds)
    assert torch.equal(again.get(5, 1)[0], Batches(vocab=256, seq_len=9, micro_batch=2, global_batch=8, dp_rank=1,
                                                  dp_size=2, seed=0, dataset=ds).get(5, 1)[0])


def test_synthetic_is_deterministic_per_step():
    kw = dict(vocab=100, seq_len=8, micro_batch=2, global_batch=2, dp_rank=0, dp_size=1)
    a, b = Batches(seed=1, **kw), Batches(seed=1, **kw)
    assert torch.equal(a.get(7, 0)[0], b.get(7, 0)[0])
    assert not torch.equal(a.get(7, 0)[0], a.get(8, 0)[0])
    assert int(a.get(0, 0)[0].max()) < 100


def test_directory_skips_binary_files(tmp_path):
    (tmp_path / "src.py").write_text("x = 1\n" * 50)
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00" * 100)
    ds = TextDataset.from_path(tmp_path, seq_len=7, vocab=256)
    assert ds.num_sequences == 300 // 8


def test_errors(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("tiny")
    with pytest.raises(InputFileError, match="fewer than one sequence"):
        TextDataset.from_path(short, seq_len=16, vocab=256)
    with pytest.raises(InputFileError, match="does not exist"):
        TextDataset.from_path(tmp_path / "missing.txt", seq_len=16, vocab=256)
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff" * 100)
    with pytest.raises(InputFileError, match="not UTF-8"):
        TextDataset.from_path(binary, seq_len=16, vocab=256)
    with pytest.raises(SpecError, match="vocab"):
        TextDataset.from_path(short, seq_len=2, vocab=100)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match="no files"):
        TextDataset.from_path(tmp_path / "empty", seq_len=2, vocab=256)
