"""Context parallelism: how a stack's cp group exchanges keys and values, what of it the step
waits for, and the buffers it holds.

A cp group of ``cp`` ranks (``tp`` ranks apart) splits every sequence: each rank holds
``s_loc = s / cp`` tokens of every activation. Attention needs every earlier key, so the ranks
exchange K/V blocks (``b * s_loc * 2 * kv_width`` elements, one per rank); the stack's
:class:`Flavour` says how (the attention kernels of each flavour are priced in :mod:`.attention`):

* ``ring-p2p`` style (Transformer Engine's ``cp_comm_type = "p2p"``, Megatron-Core's default;
  PyTorch CP with ``rotate_method = "alltoall"``): ``cp - 1`` K/V transfers forward, each sent to
  the next rank while the current block computes, so a transfer is exposed only where it is
  longer than the share ``overlap`` (the knob) of one ring step (:func:`behind`);
  backward the K/V go round again and each block's dK/dV follow them, the transfer of step ``i``
  hiding behind step ``i + 1``; the last dK/dV transfer, back to the owner after the last step,
  has nothing to hide behind: exposed in full.
* ``ring-allgather`` (PyTorch CP's default ``rotate_method = "allgather"``, torchtitan's default):
  the K/V of every rank are all-gathered once, launched at the diagonal block and waited for at
  the second, so the all-gather hides behind the diagonal block only; the dK/dV still go round
  the ring (PyTorch uses its all-to-all rotater for gradients) as above.
* ``allgather`` (MaxText's ``context_parallel_strategy = "all_gather"``): K/V all-gathered and
  one kernel over all keys: the gather is a data dependency of that kernel, exposed; backward
  the K/V are gathered again and the dK/dV reduce-scattered, exposed.
* ``ulysses`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Megatron-Core ``cp_comm_type = "a2a"``):
  all-to-alls turn the sequence split into a head split, so each rank runs one causal kernel over
  the whole sequence for ``heads / cp`` heads: Q, K, V all-to-all before attention and the
  output after it, their gradients the same backward; data dependencies, exposed.

Recomputation that re-runs the attention core re-runs its forward exchange. Bus volumes and link
models: :mod:`.collectives`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import CommCost, Fabric
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.stage import Stage

if TYPE_CHECKING:
    from trainperf.predict.step_model.compute import Compute


@dataclass(frozen=True, slots=True)
class Flavour:
    """How a stack runs context-parallel attention (a ``[kernels] context_parallel`` fact of its
    profile, :mod:`trainperf.predict.stack_kernels`). Byte counts are per element of the rank's
    query rows (``Q = b s_loc heads head_dim / tp``) or of its key (or value) rows
    (``K = b s_loc kv_width``), counted from the ops the implementation runs (``source``)."""

    name: str
    ring: bool
    """Attention runs as ``cp`` kernels, one per K/V block (else one kernel)."""
    kv_exchange: str
    """``send-recv`` (K/V passed round the ring, two blocks held), ``all-gather`` (the K/V of
    every rank gathered) or ``all-to-all`` (Q, K, V and the output re-split by heads)."""
    source: str
    load_balance: bool = True
    """Causal load balancing (zigzag / head-tail): every rank does the same attention work."""
    grad_bytes: float = 0.0
    """Bytes per element of the dK/dV sent between ranks (0: the activation dtype)."""
    fwd_q_step: float = 0.0
    """Forward bytes moved per Q element per ring step after the first (merging partial outputs)."""
    fwd_kv_step: float = 0.0
    """Forward bytes per K element per step after the first (packing K/V to send)."""
    fwd_q_once: float = 0.0
    bwd_q_step: float = 0.0
    """Backward bytes per Q element per step after the first (accumulating dQ)."""
    bwd_kv_step: float = 0.0
    """Backward bytes per K element per step after the first (accumulating, packing dK/dV)."""
    bwd_q_once: float = 0.0
    bwd_kv_once: float = 0.0
    kernels_per_step: float = 0.0
    """Kernels a ring step after the first launches forward (its attention call and merge ops)."""
    mem_fwd_q: float = 0.0
    """Bytes per Q element live in the forward merge (partial outputs, accumulators)."""
    mem_bwd_q: float = 0.0
    mem_bwd_kv: float = 0.0
    """Bytes per K element live backward (gradient accumulators, send and receive buffers)."""


_TORCH_SRC = ("PyTorch's context_parallel (torch/distributed/tensor/experimental/_context_parallel/_attention.py, "
              "torch 2.13, read: _templated_ring_attention and its backward, _SDPAMerger, _AllGatherRotater / "
              "_AllToAllRotater; _ContextParallelOptions: convert_to_f32 = True, enable_load_balance = True, "
              "rotate_method = ALL_GATHER). Bytes counted on the slowest (last) rank, every later step a full-query "
              "one. Forward per later step: the block output cast to fp32 (read 2, write 4), out - block_out "
              "(12), the sigmoid weight times it (8), the update (12) = 38 per Q element; concatenating K and V "
              "to send (8 per K element); once: the first cast and the final cast back (6 + 6). Backward: fp32 "
              "dQ/dK/dV zeroed (4 Q, 8 K), the first block's accumulation (10 Q, 20 K), packing dK/dV (16 K), "
              "casting back (6 Q, 12 K); per later step dQ += (10 Q), dK and dV half-block += and re-concatenated "
              "(26 K), packed to send (16 K), K/V packed (8 K). Live: the fp32 output, its update temporaries "
              "and the block output (18 Q) forward; dQ fp32 and the block's dQ (6 Q), dK/dV fp32, the block's "
              "dK/dV, the packed send and the received buffer (28 K) backward. The dK/dV travel in fp32.")
_TE_SRC = ("Transformer Engine's AttnFuncWithCPAndKVP2P (Megatron-Core --cp-comm-type p2p, its default; "
           "TE attention.py, read from memory of TE 1.x, not verified): each block's output corrected into an "
           "fp32 accumulator (read the block 2, read and write the accumulator 8: 10 per Q element per later "
           "step; zeroing and casting back 10 once), gradients added in place in the activation dtype (read "
           "2 + 2, write 2: 6 per Q and 12 per K element per later step), K/V and dK/dV sent as packed "
           "tensors in the activation dtype; live: the block output and the fp32 accumulator (6 Q) forward, "
           "dQ and the block's dQ (4 Q), two dK/dV buffers (8 K) backward.")
_GATHER_SRC = ("K/V all-gathered over the cp axis and one attention kernel over all keys (MaxText "
               "context_parallel_strategy = 'all_gather', its default, with context_parallel_load_balance = true "
               "reordering the sequence; read from memory of MaxText configs/base.yml, not verified): nothing "
               "to merge; backward the gathered dK/dV (activation dtype) are reduce-scattered.")
_ULYSSES_SRC = ("DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509, section 3): an all-to-all of Q, K and V "
                "before attention and of the output after it, over the sequence-parallel group; attention then "
                "runs on the whole sequence for heads / cp heads; the backward mirrors them. Megatron-Core's "
                "cp_comm_type 'a2a' does the same.")


def _torch(name: str, kv_exchange: str, source: str) -> Flavour:
    """PyTorch's ring (:data:`_TORCH_SRC` counts its bytes)."""
    return Flavour(name, True, kv_exchange, source, grad_bytes=4.0, fwd_q_step=38.0, fwd_kv_step=8.0,
                   fwd_q_once=12.0, bwd_q_step=10.0, bwd_kv_step=50.0, bwd_q_once=20.0, bwd_kv_once=56.0,
                   kernels_per_step=12.0, mem_fwd_q=18.0, mem_bwd_q=6.0, mem_bwd_kv=28.0)


FLAVOURS: dict[str, Flavour] = {
    "ring-allgather": _torch("ring-allgather", "all-gather", _TORCH_SRC),
    "ring-alltoall": _torch("ring-alltoall", "send-recv", _TORCH_SRC + " With rotate_method = 'alltoall' the K/V go "
                            "round the ring as the gradients do."),
    "ring-p2p": Flavour("ring-p2p", True, "send-recv", _TE_SRC, fwd_q_step=10.0, fwd_q_once=10.0, bwd_q_step=6.0,
                        bwd_kv_step=12.0, kernels_per_step=4.0, mem_fwd_q=6.0, mem_bwd_q=4.0, mem_bwd_kv=8.0),
    "allgather": Flavour("allgather", False, "all-gather", _GATHER_SRC),
    "ulysses": Flavour("ulysses", False, "all-to-all", _ULYSSES_SRC),
}
"""The flavours a stack profile may name (``[kernels] context_parallel``)."""


def flavour(name: str, load_balance: bool = True) -> Flavour:
    """The :class:`Flavour` ``name`` (:data:`FLAVOURS`), with or without causal load balancing."""
    fl = FLAVOURS[name]
    return fl if fl.load_balance == load_balance else dataclasses.replace(fl, load_balance=load_balance)


def _kv_elements(lay: Layout, st: Stage) -> Num:
    """K (or V) elements of one rank's block: ``b * s_loc * kv_width`` (kv heads split over tp)."""
    return lay.mesh.micro_batch * lay.model.seq_len / lay.mesh.cp * st.kv_local


def behind(comm_s: Num, window_s: Num, overlap: Num) -> Num:
    """Exposed part of a transfer that runs beside a compute window of ``window_s``:
    ``max(0, comm - overlap * window)`` (the ``overlap`` knob is the share of the window it can
    use; the ring's transfers run on their own stream beside the block's kernel)."""
    return vec.maximum(0.0, comm_s - overlap * window_s)


def _exchange(lay: Layout, st: Stage, fab: Fabric, c: Compute, ovl: Num) -> tuple[Num, Num, Num, Num, Num, Num]:
    """One layer's exchange per micro-batch: (forward seconds, forward exposed, forward bytes sent,
    backward seconds, backward exposed, backward bytes sent) on one rank of the group."""
    m, fl, a = lay.mesh, lay.kernels.cp_flavour, c.layer.attn
    g = fab.group(m.cp, m.tp)
    kv = _kv_elements(lay, st)
    block = 2.0 * kv * lay.run.act_bytes
    grad = 2.0 * kv * (fl.grad_bytes if fl.grad_bytes else lay.run.act_bytes)
    steps = vec.maximum(m.cp - 1.0, 0.0)
    if fl.kv_exchange == "all-to-all":  # Q, K, V in and the output back; the same backward
        q = lay.mesh.micro_batch * lay.model.seq_len / m.cp * lay.model.q_dim / m.tp * lay.run.act_bytes
        t = fab.time_s("all-to-all", 2.0 * q + block, g, 2.0)
        sent = steps / vec.maximum(m.cp, 1.0) * (2.0 * q + block)
        return t, t, sent, t, t, sent
    if fl.kv_exchange == "all-gather":  # one all-gather of every rank's K/V
        t_kv = fab.time_s("all-gather", m.cp * block, g)
        fwd_t = t_kv
        fwd_x = behind(t_kv, a.first_fwd, ovl) if fl.ring else t_kv
    else:  # cp - 1 sends, each behind one step
        t_kv = fab.time_s("send-recv", block, g)
        fwd_t, fwd_x = steps * t_kv, steps * behind(t_kv, a.step_fwd, ovl)
    if not fl.ring:  # gathered again, the gathered dK/dV reduce-scattered: both waited for
        t_rs = fab.time_s("reduce-scatter", m.cp * grad, g)
        return fwd_t, fwd_x, steps * block, t_kv + t_rs, t_kv + t_rs, steps * (block + grad)
    # the K/V again, and dK/dV round the ring: each behind the next step, the last one exposed
    t_grad = fab.time_s("send-recv", grad, g)
    if fl.kv_exchange == "all-gather":
        kv_x, per_step = behind(t_kv, a.first_bwd, ovl), t_grad
    else:
        kv_x, per_step = 0.0, t_grad + t_kv
    bwd_x = kv_x + steps * behind(per_step, a.step_bwd, ovl) + t_grad
    return fwd_t, fwd_x, steps * block, fwd_t + m.cp * t_grad, bwd_x, steps * block + m.cp * grad


def context_parallel(lay: Layout, st: Stage, kn: KnobValues, fab: Fabric, c: Compute) -> CommCost:
    """The step's K/V exchanges on the slowest rank and what of them is exposed (0 with cp = 1;
    see the module docstring): every layer of every micro-batch, the forward again where the
    checkpointing policy re-runs the attention core. A hybrid's Mamba-2 blocks exchange nothing
    here (their share, ``1 - attn_frac``, is left out; what Megatron-Core's context-parallel Mamba
    sends is not priced)."""
    m = lay.mesh
    fwd_t, fwd_x, fwd_b, bwd_t, bwd_x, bwd_b = _exchange(lay, st, fab, c, kn.overlap)
    fwd_passes = 1.0 + st.rec_frac * st.rc.attention_core
    on, M = m.cp > 1, m.grad_accum * lay.model.attn_frac
    time_s = vec.where(on, M * c.layers * (fwd_passes * fwd_t + bwd_t), 0.0)
    exposed = vec.where(on, M * c.layers * (fwd_passes * fwd_x + bwd_x), 0.0)
    sent = vec.where(on, M * st.layers * (fwd_passes * fwd_b + bwd_b), 0.0)
    return CommCost(time_s, exposed, sent, fab.group(m.cp, m.tp))


def ring_buffer_bytes(lay: Layout, st: Stage) -> Num:
    """Bytes the attention of one layer holds beyond its activations while it runs (0 with
    cp = 1): the K/V blocks (all ``cp`` gathered, or the current and the incoming one of a
    ring), and the flavour's merge and gradient buffers, the larger of forward and backward. A
    gathering flavour without a ring also holds the gathered dK/dV before their reduce-scatter;
    Ulysses' re-split tensors are the same size as the ones they replace (nothing added)."""
    m, fl = lay.mesh, lay.kernels.cp_flavour
    kv = _kv_elements(lay, st)
    q = m.micro_batch * lay.model.seq_len / m.cp * lay.model.q_dim / m.tp
    held = {"all-gather": m.cp, "send-recv": 2.0, "all-to-all": 0.0}[fl.kv_exchange]
    blocks = held * 2.0 * kv * lay.run.act_bytes
    grad_b = fl.grad_bytes if fl.grad_bytes else lay.run.act_bytes
    gathered_grads = m.cp * 2.0 * kv * grad_b if fl.kv_exchange == "all-gather" and not fl.ring else 0.0
    work = vec.maximum(fl.mem_fwd_q * q, fl.mem_bwd_q * q + fl.mem_bwd_kv * kv + gathered_grads)
    return vec.where(m.cp > 1, blocks + work, 0.0)
