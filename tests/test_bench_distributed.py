"""Multi-process bench runs on CPU (gloo): FSDP2, TP+SP, two "nodes" through torchrun's c10d
rendezvous on 127.0.0.1, a killed rank, stop signals, a killed launcher, and two runs into one
directory. Each starts real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainperf.measure.testing import TINY_FLAGS, fake_calibration
from trainperf.records.jsonl import read_run

pytestmark = [pytest.mark.torch, pytest.mark.slow]
if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("process-tree checks read /proc", allow_module_level=True)

FP32 = [*TINY_FLAGS, "--precision", "fp32", "--seed", "3"]


@pytest.fixture
def env(tmp_path):
    fake_calibration(tmp_path / "cache")
    e = dict(os.environ, TRAINPERF_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    e.pop("WORLD_SIZE", None)
    return e


def _cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "trainperf.cli.main", "bench", *argv]


def _run(env, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(*argv), env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _losses(out: Path) -> list[float]:
    return [s.loss for s in read_run(out / "steps.jsonl").steps]


def _children(pid: int) -> list[int]:
    kids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(p.name))
    return kids


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for k in _children(todo.pop()):
            out.append(k)
            todo.append(k)
    return out


def _alive(pid: int) -> bool:
    """The process still exists, running or as an unreaped zombie (both are failures here)."""
    return Path(f"/proc/{pid}").exists()


def _wait_steps(out: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    t = time.time()
    while time.time() - t < timeout:
        f = out / "steps.jsonl"
        if f.exists() and f.read_text().count('"type":"step"') >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"bench exited early: {proc.returncode}\n{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError("no steps in time")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp_and_tp_match_single_process(tmp_path, env):
    """Same seed, same global batch: FSDP2 over 2 ranks and TP+SP over 2 ranks train the same
    model on the same sequences as one process (fp32), so the losses agree."""
    one = _run(env, *FP32, "--steps", "3", "--global-batch", "4", "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    fsdp = _run(env, *FP32, "--steps", "3", "--nproc", "2", "--fsdp", "2", "--out", str(tmp_path / "fsdp"))
    assert fsdp.returncode == 0, fsdp.stderr
    assert fsdp.stdout.count("completed step:") == 3  # rank 0 alone prints
    s = json.loads((tmp_path / "fsdp" / "summary.json").read_text())
    assert s["num_devices"] == 2 and "FSDP2 over 2 ranks" in s["parallelism"] and not s["interrupted"]
    assert s["tokens_per_step"] == 4 * 32
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "one"), rel=1e-4)

    tp1 = _run(env, *FP32, "--steps", "3", "--out", str(tmp_path / "tp1"))
    tp = _run(env, *FP32, "--steps", "3", "--nproc", "2", "--tp", "2", "--sequence-parallel",
              "--out", str(tmp_path / "tp"))
    assert tp.returncode == 0 and tp1.returncode == 0, tp.stderr
    s = json.loads((tmp_path / "tp" / "summary.json").read_text())
    assert "TP=2 +SP" in s["parallelism"] and s["tokens_per_s_per_device"] == pytest.approx(s["tokens_per_s"] / 2)
    assert _losses(tmp_path / "tp") == pytest.approx(_losses(tmp_path / "tp1"), rel=1e-4)


def test_interleaved_pipeline_matches_single_process_and_resumes(tmp_path, env):
    """pp=2 x vpp=2 (interleaved 1F1B, 4 stages of one layer) over 2 processes: the same
    sequences in the same micro-batches as one process with gradient accumulation, so the same
    losses; stopped after step 2 and resumed from its torch.distributed.checkpoint, steps 3-4
    are those of the uninterrupted run."""
    four = [*FP32, "--layers", "4", "--global-batch", "4"]
    pp = [*four, "--nproc", "2", "--pp", "2", "--vpp", "2", "--checkpoint-dir", str(tmp_path / "ck")]
    one = _run(env, *four, "--steps", "4", "--out", str(tmp_path / "one"))
    first = _run(env, *pp, "--steps", "2", "--checkpoint-every", "2", "--out", str(tmp_path / "pp"))
    assert one.returncode == 0 and first.returncode == 0, first.stderr[-3000:]
    s = json.loads((tmp_path / "pp" / "summary.json").read_text())
    assert s["parallelism"].startswith("PP=2 x vpp=2 (interleaved: 4 stages, 2 per pipeline rank; "
                                       "pipeline rank 0 holds stages 0, 2)")
    resumed = _run(env, *pp, "--steps", "4", "--resume", "--out", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ref = _losses(tmp_path / "one")
    assert _losses(tmp_path / "pp") == pytest.approx(ref[:2], rel=1e-4)
    assert [st.step for st in read_run(tmp_path / "resumed" / "steps.jsonl").steps] == [3, 4]
    assert _losses(tmp_path / "resumed") == pytest.approx(ref[2:], rel=1e-4)


def test_dualpipev_matches_single_process(tmp_path, env):
    """pp=2 under DualPipeV (torch's ScheduleDualPipeV: 4 stages of one layer in a V, rank 0
    holding the first and the last, so the embedding, the head and the loss): the same sequences
    in the same micro-batches as one process with gradient accumulation, so the same losses."""
    four = [*FP32, "--layers", "4", "--global-batch", "4", "--micro-batch", "1"]
    one = _run(env, *four, "--steps", "3", "--out", str(tmp_path / "one"))
    dual = _run(env, *four, "--nproc", "2", "--pp", "2", "--pp-schedule", "dualpipev", "--steps", "3",
                "--out", str(tmp_path / "dual"))
    assert one.returncode == 0 and dual.returncode == 0, dual.stderr[-3000:]
    s = json.loads((tmp_path / "dual" / "summary.json").read_text())
    assert s["parallelism"].startswith("PP=2 x vpp=2 (dualpipev: 4 stages, 2 per pipeline rank; "
                                       "pipeline rank 0 holds stages 0, 3)")
    assert _losses(tmp_path / "dual") == pytest.approx(_losses(tmp_path / "one"), rel=1e-4)


def test_dualpipev_beside_fsdp_matches_single_process(tmp_path, env):
    """DualPipeV on two pipeline ranks, each stage sharded by FSDP2 over two data-parallel ranks
    (four processes): the losses of one process with gradient accumulation over the same eight
    sequences, so the V's placement, the loss on rank 0 and the sharded gradients agree."""
    four = [*FP32, "--layers", "4", "--global-batch", "8", "--micro-batch", "1"]
    one = _run(env, *four, "--steps", "2", "--out", str(tmp_path / "one"))
    dual = _run(env, *four, "--nproc", "4", "--pp", "2", "--fsdp", "2", "--pp-schedule", "dualpipev",
                "--steps", "2", "--out", str(tmp_path / "dual"))
    assert one.returncode == 0 and dual.returncode == 0, dual.stderr[-3000:]
    s = json.loads((tmp_path / "dual" / "summary.json").read_text())
    assert "dualpipev" in s["parallelism"] and "FSDP2 over 2 ranks" in s["parallelism"]
    assert _losses(tmp_path / "dual") == pytest.approx(_losses(tmp_path / "one"), rel=1e-4)


def test_two_nodes_via_c10d_rendezvous(tmp_path, env):
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen(_cmd(*TINY_FLAGS, "--steps", "3", "--fsdp", "2", "--nnodes", "2", "--nproc", "1",
                                   "--rdzv-endpoint", endpoint, "--rdzv-id", "t2n",
                                   "--out", str(tmp_path / f"node{i}")),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    records = [d for d in (tmp_path / "node0", tmp_path / "node1") if (d / "steps.jsonl").exists()]
    assert len(records) == 1  # global rank 0 writes the record, on whichever node it landed
    s = json.loads((records[0] / "summary.json").read_text())
    assert s["steps_completed"] == 3 and s["num_devices"] == 2
    assert read_run(records[0] / "steps.jsonl").meta["world_size"] == 2


def _start_long_run(env, out: Path, stderr=subprocess.STDOUT) -> subprocess.Popen:
    return subprocess.Popen(_cmd(*TINY_FLAGS, "--steps", "100000", "--nproc", "2", "--fsdp", "2",
                                 "--out", str(out)),
                            env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)


def _wait_gone(pids: list[int], timeout: float, proc: subprocess.Popen | None = None) -> float | None:
    """Seconds until none of ``pids`` exists (zombies count as existing) and ``proc`` (this
    test's child, reaped here) has exited; None if not in time."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if (proc is None or proc.poll() is not None) and not [p for p in pids if _alive(p)]:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def _workers(bench_pid: int) -> tuple[list[int], dict[int, int]]:
    tree = _descendants(bench_pid)
    ranks = {}
    for pid in tree:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for kv in environ:
            if kv.startswith(b"LOCAL_RANK="):
                ranks[int(kv.split(b"=", 1)[1])] = pid
    return tree, ranks


def test_killed_rank_is_one_line_keeps_steps_and_leaves_no_process(tmp_path, env):
    """SIGKILL to rank 1 (what the OOM killer sends): one line on the terminal naming the rank,
    the signal, the steps kept and the rank's log; no traceback from torchrun or gloo there (they
    are in torchrun.log and rank<k>.log); every finished step kept; no process left."""
    out = tmp_path / "run"
    proc = _start_long_run(env, out, stderr=subprocess.PIPE)
    try:
        _wait_steps(out, 3, proc)
        tree, ranks = _workers(proc.pid)
        assert set(ranks) == {0, 1}
        os.kill(ranks[1], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    s = json.loads((out / "summary.json").read_text())
    steps = read_run(out / "steps.jsonl").steps
    assert s["interrupted"] is True and s["steps_completed"] == len(steps) >= 3
    assert s["interrupted_at_step"] == steps[-1].step + 1
    assert "INTERRUPTED at step" in stdout
    err = stderr.strip().splitlines()
    assert len(err) == 1, stderr
    assert err[0].startswith(f"worker rank 1 (pid {ranks[1]}) was killed by SIGKILL"), err[0]
    assert f"{len(steps)} step(s) kept (last step {steps[-1].step})" in err[0]
    assert err[0].endswith(f"full worker log: {out / 'rank1.log'}")
    assert "Traceback" not in stdout + stderr and "ChildFailedError" not in stdout + stderr
    # the survivor's error (gloo's wording varies by version: "Connection closed by peer", a timeout,
    # torchrun's own message) lands in its log, not on the terminal
    assert (out / "rank0.log").read_text().strip()
    assert not [p for p in tree if _alive(p)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_every_process_and_writes_the_summary(tmp_path, env, signum):
    """SIGTERM (Slurm, Kubernetes, timeout) or SIGINT (Ctrl-C) to the launcher: torchrun (its agent
    runs in the launcher) forwards it to the workers, which finish their step; every process gone
    well within 15 s (by design at most the 8 s grace + 1 s, then torchrun's SIGKILL), the summary
    written with the steps kept, exit code 128 + the signal."""
    out = tmp_path / "run"
    proc = _start_long_run(env, out)
    try:
        _wait_steps(out, 2, proc)
        tree, ranks = _workers(proc.pid)
        assert len(tree) >= 2 and set(ranks) == {0, 1}  # two workers (torchrun runs in the launcher)
        proc.send_signal(signum)
        took = _wait_gone(tree, timeout=120, proc=proc)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took is not None and took < 15.0, (took, output)
    assert proc.returncode == 128 + signum, output
    s = json.loads((out / "summary.json").read_text())
    run = read_run(out / "steps.jsonl")
    assert s["interrupted"] is True and s["steps_completed"] == len(run.steps) >= 2
    assert s["stop_signal"] == run.meta["stop_signal"] == signal.Signals(signum).name
    assert s["interrupted_at_step"] == run.steps[-1].step + 1  # the step in progress was finished
    assert f"stopped by {signal.Signals(signum).name}" in output and "Traceback" not in output


def test_a_killed_launcher_leaves_no_training_behind(tmp_path, env):
    """SIGKILL to the launcher (torchrun's agent dies with it): each worker gets SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and stops after its step; the record gets its end line."""
    out = tmp_path / "run"
    proc = _start_long_run(env, out)
    try:
        _wait_steps(out, 2, proc)
        tree, _ = _workers(proc.pid)
        proc.kill()
        proc.communicate(timeout=60)
        assert _wait_gone(tree, timeout=60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
    run = read_run(out / "steps.jsonl")
    assert run.meta["interrupted"] is True and run.meta.get("stop_signal") == "SIGTERM"


def test_two_runs_into_one_directory_exactly_one_runs(tmp_path, env):
    """Started at the same time into one --out: one runs and keeps a clean record, the other
    exits 2 with one line and touches nothing."""
    out = tmp_path / "run"
    procs = [subprocess.Popen(_cmd(*TINY_FLAGS, "--steps", "4", "--out", str(out)), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.returncode, o, e) for p, (o, e) in ((p, p.communicate(timeout=300)) for p in procs)]
    assert sorted(rc for rc, _, _ in results) == [0, 2], results
    _, _, err = next(r for r in results if r[0] == 2)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainperf bench: error: --out") and "run" in lines[0], err
    text = (out / "steps.jsonl").read_text()
    assert text.count('"type":"run"') == 1 and text.count('"type":"end"') == 1
    assert [st.step for st in read_run(out / "steps.jsonl").steps] == [1, 2, 3, 4]
    assert json.loads((out / "summary.json").read_text())["steps_completed"] == 4
