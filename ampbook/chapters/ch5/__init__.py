"""What chapter 5 (05_rtx3070) says: its verdicts and readings of committed data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ampbook.chapters.ch3 import (
    AMP_MODE,
    BASE_MODE,
    epoch_ratio,
    headline_pair,
    loader_reading,
    loader_setting,
    pair_device,
    spread_text,
    step_in_loop,
)
from ampbook.core.provenance import Value, measured
from ampbook.results import LayerProfile, ResultSet, RunPair, Setting

if TYPE_CHECKING:
    from ampbook.train import TrainConfig

# --- the committed runs against their bounds ---


@dataclass(frozen=True)
class BoundCheck:
    """A GPU pair's measured steps beside the cost model's bounds at its setting, with
    the layer profiles of that GPU and setting where there are any."""

    pair: RunPair
    device_key: str  # the device table's entry
    baseline_bound_s: float
    amp_bound_s: float
    amp_profile: LayerProfile | None = None
    baseline_profile: LayerProfile | None = None

    @property
    def bound_speedup(self) -> float:
        """The speedup if both precisions reach the same share of their bound (no upper
        bound: a precision whose kernels get closer to their bound beats it)."""
        return self.baseline_bound_s / self.amp_bound_s

    @property
    def baseline_efficiency(self) -> float:
        """The baseline's bound over its measured step (wall time)."""
        return self.baseline_bound_s / self.pair.baseline.one_step_s

    @property
    def amp_efficiency(self) -> float:
        return self.amp_bound_s / self.pair.amp.one_step_s

    @property
    def share_ratio(self) -> float:
        """Measured step speedup over the bound's (above 1: AMP beat the ratio)."""
        return self.amp_efficiency / self.baseline_efficiency

    def verdict(self) -> str:
        """The bounds' ratio against the measured step, and where AMP's time went."""
        from ampbook.core.devices import display_name

        p = self.pair
        head = (
            f"{display_name(p.setting.device_name)}, {p.label}: at equal shares of "
            f"their bounds AMP would gain {self.bound_speedup:.2f}x; its step in the "
            f"loop ran at {p.step_speedup:.2f}x"
        )
        effs = (
            f"AMP's steps reached {self.amp_efficiency:.0%} of their bound, the "
            f"baseline's {self.baseline_efficiency:.0%} (wall time)"
        )
        r = self.share_ratio
        why = (
            "AMP got closer to its bound, so the measured speedup exceeds the roofline "
            "ratio, which is no upper bound"
            if r > 1.1
            else "AMP got less close to its bound than the baseline"
            if r < 1 / 1.1
            else "both about as close to their bounds"
        )
        text = f"{head}. {effs}: {why}."
        if self.amp_profile is not None and self.baseline_profile is not None:
            text += " " + kernel_time_verdict(self.amp_profile, self.baseline_profile)
        return text


def runner_caveat(profile) -> str:
    """Which of a profile's host syncs were the runner's own, not AMP's, for a profile
    the runner of 2026-11-30 recorded (``hostmodel.profile_loop``); "" otherwise."""
    from ampbook.predict.hostmodel import RUNNER_2026_11_30, profile_loop

    loop = profile_loop(profile.record)
    if loop is not RUNNER_2026_11_30:
        return ""
    return (
        f" Part of that idle time is the runner's, not AMP's: {loop.name} (the one "
        f"that recorded these profiles) synchronised the host {loop.amp} times per AMP "
        f"step and {loop.fp32} per fp32 step ({loop.detail}); its two get_scale() "
        "reads and fp32's gradient-norm check were its own, and a loop written as "
        "PyTorch's AMP examples write it makes 2 and 1. How large that part is, is "
        "the book's host model's estimate, not a measurement: it fits one idle time "
        "per sync (all the profiles' idle time over all their syncs) and gives the "
        "runner's reads their count's share."
    )


def kernel_time_verdict(amp, baseline) -> str:
    """Where an AMP step's time went, kernels and GPU idle time apart, from two layer
    profiles of one GPU and setting."""
    ks = baseline.kernel_s / amp.kernel_s
    ws = baseline.step_s / amp.step_s
    ms = 1e3
    facts = (
        f"In the layer profiles AMP's kernels took {amp.kernel_s * ms:.1f} ms against "
        f"{baseline.kernel_s * ms:.1f} ms for {baseline.mode_label} ({ks:.2f}x), its "
        f"step {amp.step_s * ms:.1f} ms against {baseline.step_s * ms:.1f} ms "
        f"({ws:.2f}x); the GPU sat idle {amp.idle_s * ms:.1f} ms against "
        f"{baseline.idle_s * ms:.1f} ms"
    )
    if ks > 1.05 and ws < ks / 1.05:
        return (
            f"{facts}: the kernels' gain went to idle time (the gaps between kernels: "
            "launches and host work), not to slower kernels." + runner_caveat(amp)
        )
    if ks <= 1.05:
        slower = "slower" if ks <= 1.0 / 1.05 else "no faster"
        return f"{facts}: AMP's kernels themselves were {slower}."
    return f"{facts}: the step kept the kernels' gain."


def bound_checks(rs: ResultSet, model, devices=None) -> list[BoundCheck]:
    """A ``BoundCheck`` per GPU pair of ``rs`` on a listed GPU, profiles attached."""
    from ampbook.core.devices import find_device, load_devices
    from ampbook.predict.stepmodel import bound_pair, step_trace

    devices = load_devices() if devices is None else devices
    profiles = list(rs.layer_profiles)
    traces: dict[tuple, Any] = {}

    def trace(setting: Setting, precision: str):
        key = (setting.batch_size, setting.height, setting.width, precision)
        if key not in traces:
            traces[key] = step_trace(
                model, setting.batch_size, setting.height, setting.width, precision,
                "channels_last" if setting.channels_last else "channels_first",
            )  # fmt: skip
        return traces[key]

    out = []
    for p in rs.pairs():
        dev = find_device(p.setting.device_name, devices)
        if dev is None:
            continue
        amp = p.amp.precision
        tr = {"fp32": trace(p.setting, "fp32"), amp: trace(p.setting, amp)}
        b = bound_pair(tr, dev, amp, baseline_tf32=p.baseline.tf32)
        bounds = b["fp32"].min_step_s, b["amp"].min_step_s
        profs = [_profile_for(profiles, p.setting, r.mode) for r in (p.amp, p.baseline)]
        out.append(BoundCheck(p, dev.key, *bounds, *profs))
    return out


def layout_evidence_verdict(rows: Sequence[dict[str, Any]]) -> str:
    """The NCHW convolutions' measured ratio against their bounds, with and without
    the transposes."""
    from ampbook.core.devices import display_name

    if not rows:
        return (
            "No NCHW layer profile of a GPU in the device table is committed, so no "
            "measurement sides with either bound: the transposes stay an assumption "
            "the book's bound leaves out."
        )
    out = []
    for r in rows:
        m, free = r["measured_ratio"], r["bound_ratio"]
        moved = r["bound_ratio_transposed"]
        closer = abs(math.log(m / free)) < abs(math.log(m / moved))
        nearer = "without" if closer else "with"
        out.append(
            f"On the {display_name(r['gpu'])} ({r['setting']}, NCHW; layer profiles, "
            f"measured) the fp16 convolutions took {r['amp_conv_s'] * 1e3:.1f} ms of "
            f"kernels against {r['fp32_conv_s'] * 1e3:.1f} ms for TF32's ({m:.2f}x); "
            f"their bounds give {free:.2f}x without the transposes and {moved:.2f}x "
            f"with them, so the measurement lies nearer the bound {nearer} them. "
            "The profiles keep one time per module, not per kernel, so any NCHW-to-"
            "NHWC transpose kernels cuDNN ran are inside the measured "
            f"{r['amp_conv_s'] * 1e3:.1f} ms: {m:.2f}x fits either no transposes or "
            "transposes cheaper than the assumed bound's, beside convolutions at a "
            "lower share of their bound. It sides with a bound without sizing the "
            "transposes."
        )
    return " ".join(out)


def _profile_for(profiles, setting: Setting, mode: str) -> LayerProfile | None:
    """The last layer profile of ``mode`` on the setting's GPU, batch and size."""
    key = (setting.device_name, setting.batch_size, setting.height, setting.width)
    found = [lp for lp in profiles if lp.mode == mode and _setting_key(lp) == key]
    return found[-1] if found else None


def _setting_key(p) -> tuple:
    return (p.device_name, p.batch_size, p.height, p.width)


def profile_pair(rs: ResultSet, device: str | None = None, pair=None):
    """The ``(baseline, amp)`` layer profiles of the headline modes (``pair``'s mode,
    device and setting where given), or None; ``rs``: a ResultSet or its pairs."""
    amp_mode = pair.amp.mode if pair is not None else AMP_MODE
    base_mode = pair.baseline.mode if pair is not None else BASE_MODE
    pps = rs.profile_pairs() if hasattr(rs, "profile_pairs") else list(rs)
    for b, a in pps:
        if (a.mode, b.mode) != (amp_mode, base_mode):
            continue
        if device is not None and a.device_name != device:
            continue
        if pair is not None and _setting_key(a) != _setting_key(pair.setting):
            continue
        return b, a
    return None


def _profile_ratio(rs, device, pair, attr: str, what: str) -> Value | None:
    """``attr`` of the baseline's layer profile over AMP's, measured; None without."""
    from ampbook.core.devices import display_name

    pp = profile_pair(rs, device, pair)
    if pp is None:
        return None
    b, a = pp
    return measured(
        getattr(b, attr) / getattr(a, attr),
        f"layer profiles on the {display_name(a.device_name)} ({Path(b.path).name}, "
        f"{Path(a.path).name}): {what}{getattr(a, attr) * 1e3:.2f} ms against "
        f"{getattr(b, attr) * 1e3:.2f} ms",
        fmt=".2f",
        unit="x",
    )


def step_alone(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """AMP's step *timed alone* against fp32 with TF32's (no loader), from the
    committed layer profiles, or None without them."""
    return _profile_ratio(rs, device, pair, "step_s", "")


def kernel_speedup(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """The same profiles' kernel time ratio (baseline over AMP), idle time left out."""
    return _profile_ratio(rs, device, pair, "kernel_s", "kernels ")


def gpu_in_short(pairs, profile_pairs=()) -> str:
    """A chapter's opening box: what the committed GPU runs say of AMP's speed, and,
    with layer profiles of that GPU and setting, the step timed alone."""
    p = headline_pair(pairs)
    if p is None:
        return "No GPU run is committed to test this on a GPU."
    amp, base = p.amp, p.baseline
    env = amp.record.get("environment", {})
    soft = f"torch {env['torch']}" if env.get("torch") else "today's software"
    head = f"On {pair_device(p)} with {soft}, our runs"
    st, ep = step_in_loop(None, pair=p), epoch_ratio(None, pair=p)
    if p.loader_bound:
        wait = max(amp.data_wait_share, base.data_wait_share)
        text = (
            f"{head} repeat the post: the loop waited for data {wait:.0%} of its "
            f"time with {loader_setting(p)}, {loader_reading(p)} "
            f"({spread_text(ep)}); the {amp.mode_label} step in the loop ran "
            f"{spread_text(st, epochs=False)} against {base.mode_label}."
        )
    else:
        text = (
            f"{head} ran the epoch {spread_text(ep)} and, in the loop, the step "
            f"{spread_text(st)} ({amp.mode_label} against {base.mode_label})."
        )
    prof = profile_pair(profile_pairs, pair=p)
    if prof is not None:
        b, a = prof
        text += (
            f" Timed alone (layer profiles): step {step_alone(profile_pairs, pair=p)}, "
            f"kernels {kernel_speedup(profile_pairs, pair=p)}; GPU idle "
            f"{a.idle_s * 1e3:.1f} ms against fp32's {b.idle_s * 1e3:.1f} ms."
        )
    return text


# --- the post's setting from its memory figures ---


def solve_pixels(
    fp32_line, amp_line, fp32_bytes: float, amp_bytes: float, slack: float = 1.0
) -> dict[str, float]:
    """The pixels per batch at which two reported memory figures fit the model
    ``fixed + slack * line(pixels)`` (``line``: ``measure.memory.Line`` fits of the
    bytes saved for backward; ``fixed``, the same in both runs: context, workspace,
    weights, optimizer state; ``slack`` >= 1: the allocator's overhead). The figures'
    difference fixes the pixels, the fp32 figure ``fixed``."""
    if slack < 1:
        raise ValueError(f"slack must be >= 1 (the allocator only adds), got {slack}")
    per_pixel = slack * (fp32_line.slope - amp_line.slope)
    if per_pixel <= 0:
        raise ValueError(
            "AMP saves no bytes per pixel under these lines: no setting fits"
        )
    pixels = (
        fp32_bytes - amp_bytes - slack * (fp32_line.intercept - amp_line.intercept)
    ) / per_pixel
    if pixels <= 0:
        raise ValueError(
            f"the figures differ by {fp32_bytes - amp_bytes:.3g} bytes, less than "
            "AMP's fixed saving: no positive batch fits"
        )
    return {
        "pixels": pixels,
        "fp32_saved_bytes": fp32_line(pixels),
        "amp_saved_bytes": amp_line(pixels),
        "fixed_bytes": fp32_bytes - slack * fp32_line(pixels),
    }


# --- one-line verdicts for the conclusions that depend on the machine ---


def reserved_verdict(
    runs: Sequence[Any], slack: Sequence[float], where: str = "the committed GPU runs"
) -> str:
    """Whether reserved memory was allocated memory times a slack in ``slack`` (low,
    high), as ``solve_pixels`` assumes, from runs that recorded both peaks."""
    lo, hi = float(slack[0]), float(slack[-1])
    if not 1 <= lo <= hi:
        raise ValueError(f"slack must be 1 <= low <= high, got {list(slack)}")
    got = [
        r for r in runs if r.cuda_allocated_bytes and r.cuda_reserved_bytes is not None
    ]
    assumed = f"the assumed slack of {lo:.2f}-{hi:.2f}"
    if len(got) < 2:
        return (
            "No committed GPU pair recorded both its peak allocated and its peak "
            f"reserved memory: {assumed} is untested here, and the solve assumes the "
            "post's figure tracked allocated memory."
        )
    ratios = ", ".join(
        f"{r.cuda_reserved_bytes / r.cuda_allocated_bytes:.2f}x for {r.mode_label}"
        for r in got
    )
    reserved = ", ".join(f"{r.cuda_reserved_bytes / 1e9:.2f}" for r in got)
    head = (
        f"In {where} peak reserved over peak allocated memory was {ratios} "
        f"(reserved {reserved} GB)"
    )
    inside = all(
        lo <= r.cuda_reserved_bytes / r.cuda_allocated_bytes <= hi for r in got
    )
    if inside:
        return (
            f"{head}: inside {assumed}, so there a reserved figure followed the "
            "allocated one."
        )
    return (
        f"{head}: outside {assumed}. A figure of reserved memory need not follow the "
        "activations, so the solve below holds only if the post's figure tracked "
        "allocated memory."
    )


def bound_verdict(
    min_s: float,
    measured_s: float,
    what: str = "the epoch",
    timed_alone: bool = False,
    kind: str = "measured",
) -> str:
    """A roofline lower bound against a time (``kind``: "measured" or "published"); a
    step ``timed_alone`` (no loader) is the device's own work."""
    if min_s <= 0 or measured_s <= 0:
        raise ValueError(f"times must be positive, got {min_s} and {measured_s}")
    if min_s > measured_s:
        return (
            f"The bound ({min_s:.3g} s) exceeds the {kind} {measured_s:.3g} s for "
            f"{what}: the model's counts or ceilings are wrong for this run."
        )
    head = (
        f"The bound ({min_s:.3g} s) is below the {kind} {measured_s:.3g} s for {what}"
    )
    share = f"{min_s / measured_s:.0%} of the roofline"
    if timed_alone:
        return (
            f"{head}: timed without a loader, its kernels and the gaps between them "
            f"reached {share}."
        )
    return (
        f"{head}: kernels at {share} would take that long, so the bound alone does "
        "not say what set the pace."
    )


@dataclass(frozen=True)
class MeasuredEfficiency:
    """``value`` = bound / measured time of one network on one GPU (``kind``:
    "kernel" or "step" time), with what measured it."""

    network: str
    device: str
    value: float
    kind: str = "kernel"
    source: str = ""


def efficiency_range_verdict(
    min_s: float,
    efficiencies: Sequence[MeasuredEfficiency],
    measured_s: float,
    what: str,
    *,
    network: str,
    device: str,
) -> str:
    """A lower bound made a range by the efficiencies measured for ``network`` on
    ``device`` only (carried to another GPU they are a calibration, chapter 6)."""
    if min_s <= 0 or measured_s <= 0:
        raise ValueError(f"times must be positive, got {min_s} and {measured_s}")
    same = [
        e.value
        for e in efficiencies
        if e.network == network and e.device == device and 0 < e.value <= 1
    ]
    if not same:
        elsewhere = sorted(
            {f"{e.network} on {e.device}" for e in efficiencies if e.device != device}
        )
        note = (
            f"; the efficiencies measured elsewhere ({', '.join(elsewhere)}) are not "
            "used here: carried to another GPU they are a calibrated estimate, not a "
            "measurement of it"
            if elsewhere
            else ""
        )
        inner = what[:1].lower() + what[1:]
        return (
            f"No profile of {network} on {device} is committed, so no kernel "
            f"efficiency is measured there: the bound ({min_s:.3g} s) stays a lower "
            f"bound for {inner} ({measured_s:.3g} s){note}."
        )
    lo_eff, hi_eff = min(same), max(same)
    low_s, high_s = min_s / hi_eff, min_s / lo_eff
    span = f"{low_s:.3g} to {high_s:.3g} s at the {len(same)} measured efficiencies"
    span += f" ({lo_eff:.0%}-{hi_eff:.0%})" if len(same) > 1 else f" ({lo_eff:.0%})"
    if measured_s < low_s:
        return (
            f"{what} ({measured_s:.3g} s) is below the range ({span}): its kernels ran "
            "closer to the roofline than any measured profile."
        )
    if measured_s <= high_s:
        return (
            f"{what} ({measured_s:.3g} s) lies inside the range ({span}): the GPU "
            "alone could have taken that long, so the range does not decide."
        )
    return (
        f"{what} ({measured_s:.3g} s) lies above the range ({span}): the GPU's kernels "
        "alone would have been faster, so something else set the pace."
    )


def roofline_ratio_verdict(
    roofline_ratio: float,
    measured_speedup: float,
    what: str,
    tolerance: float = 0.02,
    kind: str = "measured",
) -> str:
    """An AMP speedup (``kind``: "measured" or "published") against the roofline ratio
    of the same network, GPU and setting (no upper bound: see ``BoundCheck``)."""
    if roofline_ratio <= 0 or measured_speedup <= 0:
        raise ValueError(
            f"ratios must be positive, got {roofline_ratio} and {measured_speedup}"
        )
    head = (
        f"{what}: {kind} step ratio {measured_speedup:.2f}x against a ratio of "
        f"bounds of {roofline_ratio:.2f}x"
    )
    if measured_speedup > roofline_ratio * (1 + tolerance):
        return (
            f"{head}, above it: AMP's steps got closer to their bound than the "
            "baseline's, so the ratio is no upper bound."
        )
    if measured_speedup < roofline_ratio / (1 + tolerance):
        return (
            f"{head}, below it: AMP's steps got less close to their bound than the "
            "baseline's."
        )
    return f"{head}: both reached about the same share of their bound."


@dataclass(frozen=True)
class SettingCandidate:
    """``needed_efficiency``: the least share of the roofline the kernels must reach
    for the epoch to fit in the measured one (bound / measured)."""

    label: str
    memory_fits: bool
    needed_efficiency: float


def setting_verdict(
    candidates: Sequence[SettingCandidate],
    reference: MeasuredEfficiency | None = None,
) -> str:
    """The candidate that fits the memory figures and needs the lowest share (at most
    100%) of the roofline; ``reference`` (measured on another GPU) is context only."""
    if not candidates:
        raise ValueError("no candidate settings to weigh")
    needs = "; ".join(
        f"{c.label} {'fits' if c.memory_fits else 'does not fit'} the memory and needs "
        f"{c.needed_efficiency:.0%}"
        for c in candidates
    )
    context = (
        f" (for scale: {reference.network}'s {reference.kind}s reached at most "
        f"{reference.value:.0%} of their roofline on {reference.device}, another GPU)"
        if reference
        else ""
    )
    both = [c for c in candidates if c.memory_fits and c.needed_efficiency <= 1]
    if not both:
        return (
            f"No candidate fits both the memory and the time figures: {needs}{context}."
        )
    best = min(both, key=lambda c: c.needed_efficiency)
    others = [c for c in both if c is not best]
    why = (
        f"; the others that fit need {min(c.needed_efficiency for c in others):.0%} "
        "or more"
        if others
        else ""
    )
    return (
        f"{best.label} fits both: its kernels need only {best.needed_efficiency:.0%} "
        f"of the roofline to finish within the post's epoch{why}. All candidates: "
        f"{needs}{context}."
    )


def lowp_verdict(
    flags: Sequence[str] | None, lowp_over_fp32: float, what: str = "bf16"
) -> str:
    """Whether this CPU's low-precision matmul is fast, from its measured rate over
    fp32's; ``flags`` (the CPU's low-precision flags) are reported, never relied on."""
    if lowp_over_fp32 <= 0:
        raise ValueError(f"lowp_over_fp32 must be positive, got {lowp_over_fp32}")
    listed = ""
    if flags is not None:
        listed = f" (it lists {', '.join(flags) or 'no bf16/fp16 units'})"
    so = (
        "low precision can pay here"
        if lowp_over_fp32 >= 1
        else "the kernels PyTorch runs here for it are slower than fp32's, and AMP "
        "costs time"
    )
    rate = f"{lowp_over_fp32:.2f}x fp32's rate{listed}"
    return f"This CPU's {what} matmul runs at {rate}: {so}."


def loader_check_verdict(measured: dict, model: dict) -> str:
    """Images per second measured with the fewest workers above 0 against the loader
    model's (both keyed by worker count)."""
    workers = min((w for w in measured if w > 0 and w in model), default=None)
    if workers is None:
        return (
            "No run with workers was measured, so the loader model is unchecked here."
        )
    off = measured[workers] / model[workers]
    plural = "worker" if workers == 1 else "workers"
    return (
        f"With {workers} {plural} the loader delivered {off:.2f} of the model's rate: "
        f"the check is off by {abs(off - 1):.0%}, and the epoch times below, from the "
        "model, carry an error of that order."
    )


def hypotheses_verdict(
    step_speedup: float,
    epoch_speedup: float,
    data_wait_share: float,
    *,
    wait_measured: bool = True,
) -> str:
    """The chapter's two explanations of "AMP gave no speedup" weighed for one GPU
    pair on the post's 2020 software (today's pairs: ``ch3.gpu_pair_verdict``): (a) the
    loader bounds the epoch (the AMP run waits for data at least half its time); (b)
    the AMP step is no faster than fp32's (at most 1.05x). With ``wait_measured=False``
    the share was inferred by difference, an upper bound: (a) then also needs equal
    epochs (within 5%) from steps that differ by more than 5%."""
    slow_step = step_speedup <= 1.05
    if wait_measured:
        loader = data_wait_share >= 0.5
        wait = f"the loader took {data_wait_share:.0%} of the loop"
    else:
        epochs_equal = abs(epoch_speedup - 1) <= 0.05
        steps_differ = abs(step_speedup - 1) > 0.05
        loader = data_wait_share >= 0.5 and epochs_equal and steps_differ
        wait = (
            f"at most {data_wait_share:.0%} of the loop was left for data (by "
            "difference, not measured)"
        )
        if loader:
            wait = (
                f"the epochs were equal ({epoch_speedup:.2f}x) while the steps were "
                f"not, and {wait}"
            )
    if slow_step and loader:
        return f"Both: the AMP step alone ran at {step_speedup:.2f}x fp32's; {wait}."
    if slow_step:
        return (
            f"(b) the AMP step is no faster: alone it ran at {step_speedup:.2f}x "
            f"fp32's, and {wait}."
        )
    if loader:
        return (
            f"(a) the loader: the AMP step alone was {step_speedup:.2f}x faster, the "
            f"epoch {epoch_speedup:.2f}x; {wait}."
        )
    return (
        f"Neither: the AMP step was {step_speedup:.2f}x faster and the epoch "
        f"{epoch_speedup:.2f}x; {wait}."
    )


# --- timing the runner's step in turns (the page's check of the rule) ---
def step_rounds(
    configs: dict[str, TrainConfig], rounds: int = 5
) -> dict[str, list[float]]:
    """Runner step times of ``configs``, one step each per round in turns after a
    warm-up (``time_rounds``): ``{name: [seconds, one per round]}``."""
    from ampbook.measure.timing import time_rounds
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    steps = {}
    for name, cfg in configs.items():
        res = validate(cfg)
        batch = step_batch(cfg, res.device)
        steps[name] = (build_training(cfg, res).step, batch, res.device)
    return time_rounds(steps, rounds)
