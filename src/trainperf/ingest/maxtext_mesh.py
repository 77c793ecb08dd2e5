"""MaxText's device mesh, from the parallelism settings its configuration dump prints.

MaxText lays its devices out on one mesh per run: within a slice (ICI) ``ici_<axis>_parallelism``
and across slices (DCN) ``dcn_<axis>_parallelism`` for every axis (``data``, ``fsdp``,
``fsdp_transpose``, ``sequence``, ``context``, ``tensor``, ``tensor_transpose``,
``tensor_sequence``, ``expert``, ``pipeline``, ``autoregressive`` ...). One value of each set may be
``-1``: MaxText fills it so that the set's product is the devices of a slice (ICI) or the number
of slices (DCN) (``max_utils.fill_unspecified_mesh_axes``; ``configs/base.yml`` defaults
``ici_fsdp_parallelism: -1``, ``dcn_data_parallelism: -1``). An axis's degree is its ICI value
times its DCN value.

In trainperf's plan: ``data`` is dp; ``fsdp`` and ``fsdp_transpose`` both shard parameters (fsdp);
``tensor``, ``tensor_transpose`` and ``tensor_sequence`` split the matmuls (tp); ``sequence`` and
``context`` split the sequence (cp); ``expert`` is ep; ``pipeline`` is pp. Axes used only for
decoding (``autoregressive``, ``context_autoregressive``) must be 1 in training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

PLAN_AXES: dict[str, tuple[str, ...]] = {
    "dp": ("data",), "fsdp": ("fsdp", "fsdp_transpose"), "tp": ("tensor", "tensor_transpose", "tensor_sequence"),
    "cp": ("sequence", "context"), "ep": ("expert",), "pp": ("pipeline",),
}
"""trainperf's plan degree -> the MaxText mesh axes whose product it is."""


def _filled(values: Mapping[str, int], target: int) -> dict[str, int] | None:
    """``values`` with its one ``-1`` filled so that the product is ``target``; ``None`` when that
    cannot be done (two ``-1``, a zero, a product that does not divide ``target``)."""
    unknown = [k for k, v in values.items() if v == -1]
    if len(unknown) > 1 or any(v == 0 or v < -1 for v in values.values()):
        return None
    known = math.prod(v for v in values.values() if v != -1)
    if unknown:
        if target % known:
            return None
        return {**values, unknown[0]: target // known}
    return dict(values) if known == target else None


def plan_degrees(ici: Mapping[str, int], dcn: Mapping[str, int], num_devices: int,
                 num_slices: int) -> dict[str, int] | None:
    """The plan's degrees (``dp``, ``fsdp``, ``tp``, ``cp``, ``ep``, ``pp``) of a MaxText mesh of
    ``num_devices`` over ``num_slices`` slices, from the ICI and DCN settings by axis; ``None`` when
    they do not lay those devices out (a product that is not the device count, a decoding axis
    above 1)."""
    if num_slices < 1 or num_devices % num_slices:
        return None
    ici_full = _filled(dict(ici), num_devices // num_slices)
    dcn_full = _filled(dict(dcn), num_slices)
    if ici_full is None or dcn_full is None:
        return None
    axes = set(ici_full) | set(dcn_full)
    degree = {a: ici_full.get(a, 1) * dcn_full.get(a, 1) for a in axes}
    mapped = {a for names in PLAN_AXES.values() for a in names}
    if any(d != 1 for a, d in degree.items() if a not in mapped):
        return None
    return {plan: math.prod(degree.get(a, 1) for a in names) for plan, names in PLAN_AXES.items()}
