"""Hardware written in free text -> one catalog id, by one documented rule.

Runs tables and workload files written by people name devices as they please: "NVIDIA
H100-SXM5-80GB", "H100 80GB (SXM per composer h100-sxm mapping)", "GB200 (NVL72)", "H200 141GB",
"TPU v5p", "AMD Instinct MI355X", "MI250X (GCD)", "NVIDIA Blackwell GPU (B200-SXM-180GB)".
:func:`read_device` maps such a text to an id of the device catalog
(:mod:`trainperf.specs.hardware`), or says in one line why it cannot: the candidates it
hesitates between, or the nearest catalog parts. Nothing is guessed beyond the rule below; every
choice the rule makes for a text is written into the reading's ``how``.

The rule, in order:

1. **Exact.** The whole text is a catalog id or alias (case, spaces and underscores aside), or a
   catalog ``name`` (case and punctuation aside): that id.
2. **Words.** The text is lowercased and split into words on anything but letters and digits
   (a word fusing a part and a qualifier, "h100sxm5", is split). The words read are:

   * a *part*: a catalog family, i.e. the first segment of a catalog id (``h100``, ``a100``,
     ``gb200``, ``mi250x``, ``gaudi3``; for TPUs ``tpu-v5p``), as one word or two adjacent
     words ("TPU v5p", "Gaudi 3"), in the plural ("H100s") or after a count ("8xH100"); a TPU
     version with a letter alone ("v5p"); an AMD part without its X suffix ("MI300", "MI355")
     when only the X part is in the catalog;
   * a *generation*: a silicon name (``blackwell``, ``hopper``, ``ampere``, ``volta``,
     ``cdna3``..., ``trillium`` for TPU v6e): the parts of that silicon, read only when no
     part is named;
   * a *form*: SXM/SXM2-SXM6, OAM, HGX, DGX, mezzanine (the *board* part); PCIe; NVL (the
     PCIe-card pair such as H100 NVL -- but NVL72/NVL36 name a GB200 rack, a board); GCD (one
     die of an MI250/MI250X, which wins over "OAM" in the same text: it says what was counted);
   * a *memory*: a number followed by GB or GiB (never Gb/s); a number followed by a bare G
     ("A100-40G", "V100 16G") is read as GB only where it picks among the candidates left (a
     "400G" NIC, which no part has, then says nothing).

   * a *power*: a number followed by W or watts ("@ 500W power limit").

   Two different parts named make the text ambiguous, except a superchip with its GPU ("GB200
   ... B200 GPU": the superchip).
3. **Filter.** The candidates are the catalog parts of the named family (or generation). A
   stated form keeps the parts of that form. An unstated form keeps the board parts when the
   family has any (training clusters are built from SXM/OAM boards; a PCIe, NVL or GCD part
   must be named). Several forms stated ("H100 SXM 96GB HBM2e @ 500W; peak between SXM and
   NVL per docs") keep the parts of any of them, and the text resolves only if its memory, its
   memory type or its power, below, leave exactly one. A stated memory keeps the parts whose
   memory is nearest to it, within 7% (a B200 "192GB", its launch figure, is the catalog's 180
   GB part; the reading says so). If nothing is left the text is unresolved, and the reason
   lists the family's parts.
4. **Distinguishing words.** A word of the text (three letters or more, not a common word such
   as "per" or "GPU") found in the catalog name of some remaining candidates but not all
   ("HBM2e", "Ultra") keeps those; a stated power keeps, of several candidates, those whose
   catalog power (``tdp_W``) is within 10% of it (a power no candidate has says nothing: parts
   are capped below their rating).
5. **Base part.** Several parts of one family still left, all with the same peak TFLOP/s
   (they differ in memory only): the family's base part, the shortest id, then the largest
   memory (a bare "H100" is ``h100-sxm``, a bare "A100" ``a100-sxm-80gb``), with the
   alternatives named in ``how``. Otherwise the text is ambiguous and the reason lists them.

Before the rule, a cloud instance type that holds one GPU model (:data:`CLOUD_INSTANCES`:
"p5.48xlarge", "a3-megagpu-8g", "ND96isr_H100_v5") is replaced by that GPU's description, and the
reading says so.

The rule reads the catalog, so a part added to ``devices.toml`` is recognised without a code
change (its family is the first segment of its id).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError

__all__ = ["DeviceReading", "hardware_by_name", "read_device"]

MEMORY_TOLERANCE = 0.07
"""Largest relative gap between a stated memory size and a catalog part's ``hbm_GB``."""

_BOARD = frozenset({"sxm", "sxm2", "sxm3", "sxm4", "sxm5", "sxm6", "oam", "hgx", "dgx", "mezzanine"})
_PCIE = frozenset({"pcie", "pci"})
_GCD = frozenset({"gcd", "gcds"})
_RACK = re.compile(r"^nvl\d+$")  # NVL72, NVL36: a GB200/GB300 rack, not the NVL card pair
_FORM_TEXT = {"board": "board (SXM/OAM)", "pcie": "PCIe", "nvl": "NVL", "gcd": "GCD"}
_SILICON_SYNONYMS = {"trillium": "tpu-v6e", "lovelace": "ada"}
_WORD_SYNONYMS = {"v5litepod": "v5e", "v5lite": "v5e"}
_COMMON = frozenset({"per", "the", "and", "with", "for", "from", "one", "gpu", "gpus", "node", "nodes", "chip",
                     "chips", "card", "cards", "cluster", "system", "cap", "nvidia", "amd", "google", "intel",
                     "habana", "tesla", "instinct", "cloud", "accelerator"})
"""Words of catalog names that say nothing about which part is meant (rule step 4 skips them)."""
_MEMORY = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:gb|gib)(?![a-z/]|\s*/\s*s)")
_MEMORY_G = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*g(?![a-z/]|\s*/\s*s)")
"""A number and a bare G ("40G"): memory where it picks a candidate (a NIC's "400G" does not)."""
_POWER = re.compile(r"(?<![\w.])(\d{2,4}(?:\.\d+)?)\s*(?:w|watts?)(?![a-z])")
POWER_TOLERANCE = 0.10
"""Largest relative gap between a stated power and a catalog part's ``tdp_W`` (rule step 4)."""
_FUSED = re.compile(r"^([a-z]+\d+[a-z]*?)(sxm\d?|pcie|nvl\d*|oam|gcds?|\d+gb)$")
_PART_LIKE = re.compile(r"^[a-z]{1,9}\d{1,4}[a-z]{0,2}$")
_NOT_PARTS = re.compile(r"^(sxm\d?|nvl\d*|hbm\d?[a-z]?|pcie\d?|gen\d|x\d+|fp\d+|bf\d+|tf\d+|int\d+|ddr\d|"
                        r"nvlink\d?|cx\d|connectx\d+|ib\d*|v\d+|\d+gb|\d+x)$")


@dataclass(frozen=True)
class DeviceReading:
    """How one hardware text was read."""

    text: str
    """The text as written."""
    device_id: str
    """The catalog id it resolves to; ``""`` when it does not resolve."""
    how: str
    """One line: the rule steps that picked the id, or why no id was picked."""
    candidates: tuple[str, ...] = ()
    """Catalog ids the text could name when it is ambiguous (empty otherwise)."""

    @property
    def resolved(self) -> bool:
        return bool(self.device_id)

    def describe(self) -> str:
        """``'<text>' -> <id> (<how>)``, or ``'<text>': <reason>``."""
        if self.resolved:
            return f"{self.text!r} -> {self.device_id} ({self.how})"
        return f"{self.text!r}: {self.how}"


@dataclass(frozen=True)
class _Part:
    id: str
    family: str
    form: str
    hbm_GB: float
    peaks: tuple[tuple[str, float], ...]
    silicon: str
    name_words: frozenset[str]
    tdp_W: float = 0.0


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", s.lower())


def _family_of(device_id: str) -> str:
    segs = device_id.split("-")
    return "-".join(segs[:2]) if segs[0] == "tpu" and len(segs) > 1 else segs[0]


def _form_of(device_id: str, name: str = "") -> str:
    """The part's form from its id ("h100-pcie") or, for a family made only in one form whose id
    does not say it (L4, L40S), from its catalog name ("NVIDIA L40S 48GB (PCIe)")."""
    segs = set(device_id.split("-")[1:]) | set(re.findall(r"[a-z0-9]+", name.lower()))
    for form in ("pcie", "nvl", "gcd"):
        if form in segs:
            return form
    return "board"


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, list[_Part]], dict[str, str], dict[str, str]]:
    """(family -> parts, normalised id/alias/name -> id, normalised family -> family)."""
    from trainperf.specs.hardware import device_aliases, get_hardware, hardware_ids

    families: dict[str, list[_Part]] = {}
    exact: dict[str, str] = {}
    for i in hardware_ids():
        exact[i] = i
        if i == "cpu":  # filled from this machine; only its exact id names it
            continue
        hw: Any = get_hardware(i)
        exact[_norm(hw.name)] = i
        fam = _family_of(i)
        families.setdefault(fam, []).append(_Part(
            id=i, family=fam, form=_form_of(i, hw.name), hbm_GB=float(hw.hbm_GB),
            peaks=tuple(sorted(hw.peak_tflops.items())), silicon=hw.silicon,
            name_words=frozenset(re.findall(r"[a-z0-9]+", hw.name.lower())) | frozenset(i.split("-")),
            tdp_W=float(hw.tdp_W or 0.0)))
    for alias, target in device_aliases().items():
        exact[alias] = target
    return families, exact, {_norm(f): f for f in families}


def _words(low: str) -> list[str]:
    out: list[str] = []
    low = re.sub(r"\bnvl[ _-]?(\d{2,3})\b", r"nvl\1", low)  # "NVL 72" is the rack NVL72
    for w in re.findall(r"[a-z0-9]+", low):
        w = re.sub(r"^\d+x(?=[a-z]+\d)", "", w)  # "8xH100": a count, then the part
        m = _FUSED.match(w)
        out += [m.group(1), m.group(2)] if m else [w]
    for k in range(len(out) - 1, 0, -1):  # "v5 lite(pod)": Google's name of TPU v5e
        if out[k] in ("lite", "litepod") and out[k - 1] == "v5":
            out[k - 1:k + 1] = ["v5e"]
    return [_WORD_SYNONYMS.get(w, w) for w in out]


def _parts_named(words: list[str], fam_norm: dict[str, str]) -> list[str]:
    """Catalog families named by the words (rule step 2), in order of appearance."""
    found: list[str] = []
    has_tpu = "tpu" in words

    def add(f: str) -> None:
        if f not in found:
            found.append(f)

    for k, w in enumerate(words):
        nxt = words[k + 1] if k + 1 < len(words) else ""
        if nxt and w + nxt in fam_norm and not w.isdigit():
            add(fam_norm[w + nxt])
        elif w in fam_norm:
            add(fam_norm[w])
        elif w.endswith("s") and w[:-1] in fam_norm and any(c.isdigit() for c in w):  # "H100s"
            add(fam_norm[w[:-1]])
        elif re.fullmatch(r"v\d+[a-z]*", w) and "tpu" + w in fam_norm and (has_tpu or w[-1].isalpha()):
            add(fam_norm["tpu" + w])
        elif re.fullmatch(r"mi\d{3}", w) and w not in fam_norm and w + "x" in fam_norm:
            add(fam_norm[w + "x"])
    # a superchip and its GPU (gb200 + b200): the superchip names the system
    return [f for f in found if "g" + f not in found]


def _forms_stated(words: list[str]) -> set[str]:
    forms: set[str] = set()
    for w in words:
        if w in _BOARD or _RACK.match(w):
            forms.add("board")
        elif w in _PCIE:
            forms.add("pcie")
        elif w == "nvl":
            forms.add("nvl")
        elif w in _GCD:
            forms.add("gcd")
    if "gcd" in forms:
        forms.discard("board")  # "MI250X GCD (4 OAM per node)": the die is what was counted
    return forms


def _ids(parts: list[_Part]) -> str:
    return ", ".join(f"{p.id} ({p.hbm_GB:g} GB)" for p in parts)


class _Unresolved(Exception):
    """Why a text names no single catalog part, and the ids it could name.

    Lets any rule step end the reading; :func:`read_device` turns it into an unresolved reading."""

    def __init__(self, how: str, candidates: tuple[str, ...] = ()) -> None:
        super().__init__(how)
        self.how = how
        self.candidates = candidates


_AWS = "AWS EC2 accelerated-computing instance types (aws.amazon.com/ec2/instance-types)"
_AZURE = "Azure ND-series sizes (learn.microsoft.com/azure/virtual-machines/sizes)"
_GCP = "Google Cloud accelerator-optimized machine types (cloud.google.com/compute/docs/accelerator-optimized-machines)"
CLOUD_INSTANCES: tuple[tuple[str, str, str], ...] = (
    (r"\bp3dn\.24xlarge\b", "V100 SXM2 32GB", _AWS),
    (r"\bp3\.(?:8|16)xlarge\b", "V100 SXM2 16GB", _AWS),
    (r"\bp4d\.24xlarge\b", "A100 SXM 40GB", _AWS),
    (r"\bp4de\.24xlarge\b", "A100 SXM 80GB", _AWS),
    (r"\bp5\.48xlarge\b", "H100 SXM 80GB", _AWS),
    (r"\bp5en?\.48xlarge\b", "H200 SXM 141GB", _AWS),
    (r"\bp6-b200\.48xlarge\b", "B200", _AWS),
    (r"\bp6e-gb200\b[\w.-]*", "GB200", _AWS),
    (r"\bnd96asr_v4\b", "A100 SXM 40GB", _AZURE),
    (r"\bnd96amsr_a100_v4\b", "A100 SXM 80GB", _AZURE),
    (r"\bnd96isr_h100_v5\b", "H100 SXM 80GB", _AZURE),
    (r"\bnd96isr_h200_v5\b", "H200 SXM 141GB", _AZURE),
    (r"\bnd96isr_mi300x_v5\b", "MI300X", _AZURE),
    (r"\ba2-highgpu-\d+g\b", "A100 SXM 40GB", _GCP),
    (r"\ba2-ultragpu-\d+g\b", "A100 SXM 80GB", _GCP),
    (r"\ba3-(?:highgpu|edgegpu|megagpu)-\d+g\b", "H100 SXM 80GB", _GCP),
    (r"\ba3-ultragpu-\d+g\b", "H200 SXM 141GB", _GCP),
    (r"\ba4-highgpu-\d+g\b", "B200", _GCP),
    (r"\ba4x-highgpu-\d+g\b", "GB200", _GCP),
)
"""Cloud instance types (regex on the lowercased text) -> the GPU they hold, and the source."""


def _instance(low: str) -> tuple[str, str]:
    """``low`` with a cloud instance type replaced by its GPU, and the step that says so ("" if none)."""
    for pattern, gpu, source in CLOUD_INSTANCES:
        m = re.search(pattern, low)
        if m:
            return low[:m.start()] + gpu.lower() + low[m.end():], f"cloud instance {m.group(0)}: {gpu} ({source})"
    return low, ""


@lru_cache(maxsize=4096)
def read_device(text: str) -> DeviceReading:
    """Read a hardware text as a catalog id by the module's rule (never raises for text)."""
    text = str(text)
    low = text.strip().lower()
    families, exact, fam_norm = _index()
    if not low:
        return DeviceReading(text, "", "hardware not stated")
    key = re.sub(r"[\s_]+", "-", low)
    if key in exact:
        how = "catalog id" if exact[key] == key else f"catalog alias of {exact[key]}"
        return DeviceReading(text, exact[key], how)
    if _norm(low) in exact:
        return DeviceReading(text, exact[_norm(low)], "catalog name")
    low, instance = _instance(low)
    try:
        part, steps = _read_words(low, families, fam_norm)
    except _Unresolved as exc:
        return DeviceReading(text, "", f"{instance}; {exc.how}" if instance else exc.how, exc.candidates)
    return DeviceReading(text, part.id, "; ".join([instance, *steps] if instance else steps))


def _read_words(low: str, families: dict[str, list[_Part]], fam_norm: dict[str, str]) -> tuple[_Part, list[str]]:
    """Rule steps 2-5 on a lowercased text: the one part its words leave and the steps that picked
    it; raises :class:`_Unresolved` otherwise."""
    words = _words(low)
    steps: list[str] = []
    parts = _named_candidates(words, low, families, fam_norm, steps)
    forms = _forms_stated(words)
    several = len(forms) > 1
    parts = _by_form(parts, forms, steps)
    parts = _by_memory(parts, low, steps)
    if len(parts) > 1:  # with several forms stated, their words decide nothing
        parts = _distinguishing_words(parts, [w for w in words if not several or not _is_form_word(w)], steps)
    if len(parts) > 1:
        parts = _by_power(parts, low, steps)
    if several and len(parts) == 1:
        steps += _agreeing(parts[0], words, low, steps)
    if several and len(parts) > 1:
        raise _Unresolved(f"states several forms ({', '.join(sorted(forms))}) and its memory, memory "
                          f"type and power leave {', '.join(p.id for p in parts)}; state one",
                          tuple(p.id for p in parts))
    if len(parts) > 1:
        parts = [_base_part(parts, steps)]
    return parts[0], steps


def _named_candidates(words: list[str], low: str, families: dict[str, list[_Part]], fam_norm: dict[str, str],
                      steps: list[str]) -> list[_Part]:
    """Rule steps 2-3: the parts of the one family the words name, else of the generation they
    name; raises :class:`_Unresolved` for several parts, an unknown part or none."""
    named = _parts_named(words, fam_norm)
    if len(named) > 1:
        cands = tuple(p.id for f in named for p in families[f])
        raise _Unresolved(f"names several parts ({', '.join(named)}); state one", cands)
    if named:
        steps.append(f"part {named[0]}")
        return list(families[named[0]])
    unknown = _unknown_part(words, fam_norm)
    silicon = {_SILICON_SYNONYMS.get(w, w) for w in words}
    parts = [p for ps in families.values() for p in ps if p.silicon and p.silicon in silicon]
    if unknown or not parts:  # a part the catalog lacks is not read as its generation
        raise _Unresolved(unknown or _unknown_reason(low))
    steps.append(f"generation {parts[0].silicon}")
    return parts


def _by_form(parts: list[_Part], forms: set[str], steps: list[str]) -> list[_Part]:
    """Rule step 3: the stated forms keep their parts (none left: :class:`_Unresolved`); no form
    stated keeps the board parts of a family that also has others."""
    if forms:
        kept = [p for p in parts if p.form in forms]
        if not kept:
            form = _FORM_TEXT[sorted(forms)[0]]
            raise _Unresolved(f"no catalog {steps[0].split()[-1]} part has form {form} "
                              f"(catalog: {', '.join(p.id for p in parts)})", tuple(p.id for p in parts))
        steps.append(f"forms {' and '.join(_FORM_TEXT[f] for f in sorted(forms))} both stated" if len(forms) > 1
                     else f"form {_FORM_TEXT[next(iter(forms))]}")
        return kept
    if any(p.form == "board" for p in parts) and any(p.form != "board" for p in parts):
        steps.append("form not stated: board (SXM/OAM) part")
        return [p for p in parts if p.form == "board"]
    return parts


def _by_memory(parts: list[_Part], low: str, steps: list[str]) -> list[_Part]:
    """Rule step 3: a stated memory keeps the nearest parts within 7% (none: :class:`_Unresolved`);
    without one, a number with a bare G may pick among several."""
    mems = [float(m) for m in _MEMORY.findall(low)]
    if not mems:
        return _by_bare_g(parts, low, steps) if len(parts) > 1 else parts
    mem = mems[0]
    near = min(abs(p.hbm_GB - mem) for p in parts)
    kept = [p for p in parts if abs(p.hbm_GB - mem) == near and near <= MEMORY_TOLERANCE * p.hbm_GB]
    if not kept:
        raise _Unresolved(f"no catalog part of this kind has {mem:g} GB (catalog: {_ids(parts)})",
                          tuple(p.id for p in parts))
    steps.append(f"{mem:g} GB" + ("" if near == 0 else f" (catalog {kept[0].hbm_GB:g} GB, within 7%)"))
    return kept


def _base_part(parts: list[_Part], steps: list[str]) -> _Part:
    """Rule step 5: of several parts of one family with the same peaks, the family's base part;
    raises :class:`_Unresolved` when they differ in more than memory."""
    same_family = len({p.family for p in parts}) == 1
    if not (same_family and len({p.peaks for p in parts}) == 1):
        raise _Unresolved(f"could name {', '.join(p.id for p in parts)}; state the part",
                          tuple(p.id for p in parts))
    base = min(parts, key=lambda p: (len(p.id.split("-")), -p.hbm_GB, p.id))
    others = [p.id for p in parts if p is not base]
    steps.append(f"memory not stated: the family's base part (also {', '.join(others)})")
    return base


def _is_form_word(w: str) -> bool:
    return w in _BOARD or w in _PCIE or w in _GCD or w == "nvl" or bool(_RACK.match(w))


def _agreeing(part: _Part, words: list[str], low: str, steps: list[str]) -> list[str]:
    """With several forms stated: the memory type and power the text states that agree with the
    part it resolved to (said in ``how``, so a reader sees what named it)."""
    said = " ".join(steps)
    out = [f"{w!r} in its catalog name" for w in words if re.fullmatch(r"hbm\d[a-z]?|gddr\d[a-z]?", w)
           and w in part.name_words and repr(w) not in said]
    powers = [float(m) for m in _POWER.findall(low)]
    if powers and part.tdp_W and abs(part.tdp_W - powers[0]) <= POWER_TOLERANCE * part.tdp_W and " W" not in said:
        out.append(f"{powers[0]:g} W its catalog power")
    return out


def _distinguishing_words(parts: list[_Part], words: list[str], steps: list[str]) -> list[_Part]:
    """Rule step 4: words of the text in the catalog names of some candidates but not all."""
    used = {_norm(p.family) for p in parts} | {p.silicon for p in parts} | set(_SILICON_SYNONYMS) | _COMMON
    for w in sorted(set(words) - used):
        having = [p for p in parts if w in p.name_words]
        if having and len(having) < len(parts) and len(w) > 2 and not w.isdigit():
            parts = having
            steps.append(f"{w!r} in the catalog name")
    return parts


def _by_bare_g(parts: list[_Part], low: str, steps: list[str]) -> list[_Part]:
    """A number with a bare G ("A100-40G") keeps the candidates whose memory is within 7% of it,
    when that is some but not all of them (otherwise unchanged: "400G" is a NIC)."""
    for m in _MEMORY_G.findall(low):
        mem = float(m)
        having = [p for p in parts if abs(p.hbm_GB - mem) <= MEMORY_TOLERANCE * p.hbm_GB]
        if having and len(having) < len(parts):
            steps.append(f"'{m}G' read as {mem:g} GB")
            return having
    return parts


def _by_power(parts: list[_Part], low: str, steps: list[str]) -> list[_Part]:
    """Rule step 4: a stated power keeps the candidates rated within 10% of it (none: unchanged)."""
    powers = [float(m) for m in _POWER.findall(low)]
    if not powers:
        return parts
    watts = powers[0]
    having = [p for p in parts if p.tdp_W and abs(p.tdp_W - watts) <= POWER_TOLERANCE * p.tdp_W]
    if having and len(having) < len(parts):
        steps.append(f"{watts:g} W" + ("" if all(p.tdp_W == watts for p in having) else
                                        f" (catalog {having[0].tdp_W:g} W, within 10%)"))
        return having
    return parts


def _unknown_part(words: list[str], fam_norm: dict[str, str]) -> str:
    """The reason naming a part-like word that is no catalog part ("GB300", "MI300A"), or ""."""
    for w in words:
        if _PART_LIKE.match(w) and not _NOT_PARTS.match(w):
            near = difflib.get_close_matches(w, list(fam_norm), n=3, cutoff=0.6)
            near_txt = f" (nearest: {', '.join(fam_norm[n] for n in near)})" if near else ""
            return f"part {w!r} is not in the device catalog{near_txt}; `trainperf hw` lists the parts"
    return ""


def _unknown_reason(low: str) -> str:
    """Why no catalog part is named, with the catalog ids nearest to the whole text."""
    from trainperf.specs.hardware import hardware_ids

    ids = [i for i in hardware_ids() if i != "cpu"]
    near = difflib.get_close_matches(re.sub(r"[\s_]+", "-", low), ids, n=3, cutoff=0.4)
    hint = f"nearest: {', '.join(near)}" if near else "`trainperf hw` lists the parts"
    return f"names no catalog part ({hint})"


def hardware_by_name(text: str, field: str = "hardware.device") -> tuple[Any, str]:
    """The catalog :class:`~trainperf.specs.hardware.Hardware` for an id, alias or free-text
    name, and how the name was read (``""`` for an exact id or alias).

    An exact id or alias is looked up by :func:`~trainperf.specs.hardware.get_hardware`, so
    exact ids behave as they always did; anything else is read by :func:`read_device`, and a
    caller should show the returned reading (e.g. in a workload's notes). A text that does not
    resolve is a one-line :class:`~trainperf.errors.SpecError` naming the field, the text and the
    reason (the candidates, or the nearest parts)."""
    from trainperf.errors import UnknownNameError
    from trainperf.specs.hardware import get_hardware

    try:
        return get_hardware(text), ""
    except UnknownNameError:
        pass
    r = read_device(text)
    if not r.resolved:
        raise SpecError(field, text, f"not a catalog device: {r.how}")
    return get_hardware(r.device_id), r.describe()
