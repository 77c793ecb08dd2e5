"""The busiest pipeline stage: its layers, its mix of dense and MoE layers, its parameters, and
the checkpointing policy as numbers per layer; what both the step time and the memory read.

The mesh is ``pp x dp x fsdp x cp x tp`` (tp innermost, pp outermost: Megatron-Core's default
order tp-cp-ep-dp-pp, torchtitan's pp/dp_replicate/dp_shard/cp/tp mesh). Routed experts fold
over the cp x dp ranks next to their etp group (MoE parallel folding).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.accounting import recompute
from trainperf.predict.step_model.layout import Flag, Layout, Num

_NONE = 1e18
"""Stands for "no such rank" in a minimum over ranks."""


@dataclass(slots=True, eq=False)
class Stage:
    """The busiest pipeline stage of a layout (numbers or arrays, as the layout's)."""

    m_tok: Num
    """Token rows of every GEMM on one device per micro-batch: ``micro_batch * seq_len / cp``."""
    layers: Num
    """Layers on the busiest rank (the most of the first, middle and last)."""
    dense_frac: Num
    """Share of its layers with a dense MLP (the busiest rank holding the fewest dense ones)."""
    moe_frac: Num
    dense_first: Num
    """Dense-MLP layers on the first pipeline rank."""
    dense_second: Num
    dense_last: Num
    rc: recompute.LayerRecompute
    """The checkpointing policy applied to one layer."""
    rec_frac: Num
    """Share of the stage's layers the policy covers (``full:K``, ``full-every:N``; else 1)."""
    kv_local: Num
    """Key/value width per device: kv heads split over tp, replicated beyond them."""
    rope_q_local: Num
    """Query width RoPE rotates per device."""
    rope_k_local: Num
    """Key width RoPE rotates per device (MLA's one shared rotary key: whole on every tp rank)."""
    mtp_last: Num
    """Multi-token-prediction modules on the busiest rank: the model's, when that rank is the last
    pipeline stage (Megatron-Core places them there), else 0."""
    ffn_moe: Num
    """MLP-wide elements per token of an MoE block's routed experts (``topk * expert_ffn``)."""
    ffn_shared: Num
    ffn_eff: Num
    """MLP-wide elements per token of the stage's average layer."""
    tp_buf: Num
    """Bytes of one ``[b, s/cp, h]`` activation (a tensor-parallel collective's buffer)."""
    p_layer_local: Num
    """Parameters of the average layer per device (before data-parallel sharding)."""
    p_stage: Num
    """Parameters of the stage per device, before data-parallel sharding (routed experts split
    over ep and etp; the embedding or head on an end stage); twice that under DualPipe, whose
    ranks hold a stage of each of two copies of the model."""
    p_experts: Num
    """Of ``p_stage``, the routed experts' parameters."""
    zero3: Flag
    """Parameters are sharded (FSDP, or ZeRO-3 over dp)."""
    plain_dp: Flag
    """Replicated gradients to reduce: dp x cp > 1 without ZeRO-3 (whose terms the FSDP ones
    carry), or replicas of an FSDP group (HSDP, dp > 1)."""
    tp: Num
    ep: Num
    etp: Num

    def sharded(self, params: Num, shards: Num) -> Num:
        """Per-device share of ``params`` (``p_stage``-shaped) under ``shards``-way sharding. The
        routed experts are sharded only over the expert-data-parallel group: the expert grid etp
        x ep x edp covers the dense grid tp x shards, so ``shards * tp / (ep * etp)`` ranks."""
        dense = (params - self.p_experts) / shards
        return dense + self.p_experts / vec.maximum(1.0, shards * self.tp / (self.ep * self.etp))


def dense_layers_per_rank(lay: Layout) -> tuple[Num, Num, Num, Num]:
    """Dense-MLP layers on the first, the second, the middle rank with the fewest, and the last
    pipeline rank (of ``layers_first``, ``layers_mid``, ``layers_mid`` and ``layers_last``).

    An MoE model's leading dense layers (DeepSeek-V3's first 3) fill the model's first layers,
    which the pipeline lays out chunk by chunk: the first rank's first chunk (``layers_first /
    vpp`` layers), then the next rank's, and so on (Megatron-Core's interleaved order), so with
    ``pp > 1`` the first rank holds them and the others hold MoE layers only. Interleaved dense
    layers (Llama 4), more leading dense layers than one round of chunks holds, a dense model and
    ``pp = 1`` give every rank its share: ``dense_layers * its layers / layers``.
    """
    m, ms = lay.mesh, lay.model
    pp, n_dense = m.pp, ms.dense_layers
    lf, lm, ll = m.layers_first, m.layers_mid, m.layers_last
    c0, cm, cl = lf / m.vpp, lm / m.vpp, ll / m.vpp
    one_round = c0 + vec.maximum(pp - 2.0, 0.0) * cm + cl
    leading = vec.where(ms.dense_interleaved, False,
                        vec.where(ms.moe_layers > 0, vec.where(pp > 1, n_dense <= one_round, False), False))
    rest = vec.maximum(n_dense - c0, 0.0)
    by_round = (vec.minimum(n_dense, c0), vec.minimum(rest, cm),
                vec.minimum(vec.maximum(rest - vec.maximum(pp - 3.0, 0.0) * cm, 0.0), cm),
                vec.minimum(vec.maximum(rest - vec.maximum(pp - 2.0, 0.0) * cm, 0.0), cl))
    share = tuple(n_dense * n / ms.layers for n in (lf, lm, lm, ll))
    a0, a1, a2, a3 = (vec.where(leading, a, b) for a, b in zip(by_round, share, strict=True))
    return a0, a1, a2, a3


def _dense_on_busiest(lay: Layout, layers: Num, by_rank: tuple[Num, Num, Num, Num]) -> Num:
    """Dense layers of the busiest rank: of the ranks holding the most layers, the one with the
    fewest dense ones (an MoE layer holds more and does more)."""
    m = lay.mesh
    d_first, _d_second, d_mid, d_last = by_rank
    dense = vec.minimum(vec.minimum(
        vec.where(m.layers_first >= layers, d_first, _NONE),
        vec.where(vec.where(m.pp >= 3, m.layers_mid >= layers, False), d_mid, _NONE)),
        vec.where(vec.where(m.pp >= 2, m.layers_last >= layers, False), d_last, _NONE))
    return vec.where(dense < _NONE, dense, 0.0)  # layers is always some rank's


def _recompute_share(lay: Layout, rc: recompute.LayerRecompute, layers: Num) -> Num:
    """Share of the stage's layers the policy covers (``full:K``: K per model chunk;
    ``full-every:N``: every N-th layer of the model)."""
    if rc.block_layers:
        return vec.minimum(rc.block_layers * lay.mesh.vpp, layers) / layers
    if rc.every_n_layers:
        return (lay.model.layers // rc.every_n_layers) / lay.model.layers
    return 1.0


def _stage_params(lay: Layout, layers: Num, dense_frac: Num, moe_frac: Num, mtp_last: Num) -> tuple[Num, Num, Num]:
    """(parameters of the average layer, of the stage, of its routed experts) per device before
    data-parallel sharding. Routed experts are split ``etp`` ways: scaled by ``tp / etp`` here so
    that the division by ``tp`` gives ``/ etp``."""
    m, ms = lay.mesh, lay.model
    t = m.tp
    moe_block = ms.params_router_layer + (ms.moe_experts / m.ep * (t / m.etp) + ms.moe_shared) * ms.params_expert
    p_layer = ms.params_attn_layer + dense_frac * ms.params_dense_mlp_layer + moe_frac * moe_block
    # one rank holds both ends without pipeline parallelism, and under DualPipeV (rank 0 holds the V's two ends)
    both = ms.params_embedding + ms.params_head
    ends = vec.where(m.dualpipev, both, vec.where(m.pp > 1, vec.maximum(ms.params_embedding, ms.params_head), both))
    # multi-token-prediction blocks (an MoE block in an MoE model, a dense one else) sit on the last stage
    mtp_block = ms.params_attn_layer + vec.where(ms.moe_layers > 0, moe_block, ms.params_dense_mlp_layer)
    p_stage = (layers * p_layer + ends + mtp_last * (mtp_block + 2.0 * ms.hidden * ms.hidden)) / t
    p_experts = (layers * moe_frac + vec.where(ms.moe_layers > 0, mtp_last, 0.0)) * (
        ms.moe_experts / m.ep) * ms.params_expert / m.etp
    return p_layer / t, p_stage, p_experts


def busiest_stage(lay: Layout) -> Stage:
    """The :class:`Stage` of a layout."""
    m, ms = lay.mesh, lay.model
    layers = vec.maximum(vec.maximum(m.layers_first, m.layers_mid), m.layers_last)
    by_rank = dense_layers_per_rank(lay)
    dense_frac = _dense_on_busiest(lay, layers, by_rank) / layers
    moe_frac = vec.where(ms.moe_layers > 0, ms.mlp_frac - dense_frac, 0.0)
    rc = recompute.layer_recompute(lay.run.policy, ms.attn_names, ms.mlp_names, ms.gated)
    ffn_moe, ffn_shared = ms.moe_topk * ms.expert_ffn, ms.moe_shared * ms.expert_ffn
    m_tok = m.micro_batch * ms.seq_len / m.cp
    # the last stage carries the multi-token-prediction modules when it is (or ties for) the busiest
    mtp_last = vec.where(m.layers_last >= layers, ms.mtp_layers, 0.0)
    mtp_last = vec.where(m.dualpipev, vec.where(m.layers_first >= layers, ms.mtp_layers, 0.0), mtp_last)
    p_layer_local, p_stage, p_experts = _stage_params(lay, layers, dense_frac, moe_frac, mtp_last)
    # DualPipe: a rank holds two stages (one of each copy of the model), with their gradients and
    # optimizer states; counted as twice the busiest stage
    copies = vec.where(m.dualpipe, 2.0, 1.0)
    p_stage, p_experts = copies * p_stage, copies * p_experts
    kv_local = ms.kv_dim / ms.kv_heads * vec.maximum(ms.kv_heads / m.tp, 1.0)
    return Stage(
        m_tok=m_tok, layers=layers, dense_frac=dense_frac, moe_frac=moe_frac, dense_first=by_rank[0],
        dense_second=by_rank[1], dense_last=by_rank[3], rc=rc, rec_frac=_recompute_share(lay, rc, layers),
        kv_local=kv_local, rope_q_local=ms.rope_q / m.tp,
        rope_k_local=vec.where(ms.mla, ms.rope_k, kv_local), mtp_last=mtp_last, ffn_moe=ffn_moe, ffn_shared=ffn_shared,
        ffn_eff=dense_frac * ms.ffn + moe_frac * (ffn_moe + ffn_shared), tp_buf=m_tok * ms.hidden * lay.run.act_bytes,
        p_layer_local=p_layer_local, p_stage=p_stage, p_experts=p_experts, zero3=m.shards_params > 1,
        plain_dp=vec.where(m.fsdp > 1, m.dp > 1, vec.where(m.dp * m.cp > 1, m.zero_stage < 3, False)),
        tp=m.tp, ep=m.ep, etp=m.etp)
