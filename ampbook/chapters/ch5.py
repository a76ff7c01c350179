"""What chapter 5 (05_rtx3070) says: its verdicts and readings of committed data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

# --- the committed runs against their bounds ---


@dataclass(frozen=True)
class BoundCheck:
    """A GPU pair's measured steps beside the cost model's bound for that GPU, traced at
    the pair's own setting (``bound_checks``), with the layer profiles of the same GPU
    and setting where there are any (they split each step into kernel time and GPU
    idle time)."""

    pair: RunPair
    device_key: str  # the device table's entry
    baseline_bound_s: float
    amp_bound_s: float
    amp_profile: LayerProfile | None = None
    baseline_profile: LayerProfile | None = None

    @property
    def bound_speedup(self) -> float:
        """Baseline bound over AMP bound: the speedup if both precisions reach the same
        share of their bound. A ratio of two lower bounds, not an upper bound: a
        precision whose kernels get closer to their bound beats it."""
        return self.baseline_bound_s / self.amp_bound_s

    @property
    def baseline_efficiency(self) -> float:
        """The baseline's bound over its measured step (wall time: kernels and GPU idle
        time together)."""
        return self.baseline_bound_s / self.pair.baseline.one_step_s

    @property
    def amp_efficiency(self) -> float:
        return self.amp_bound_s / self.pair.amp.one_step_s

    @property
    def share_ratio(self) -> float:
        """AMP's share of its bound over the baseline's: measured step speedup over the
        bound's speedup (above 1: AMP beat the roofline ratio)."""
        return self.amp_efficiency / self.baseline_efficiency

    def verdict(self) -> str:
        """One line: the roofline ratio, the measured step, which precision got closer
        to its bound, and, with layer profiles, where the AMP step's time went."""
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
        if r > 1.1:
            why = (
                f"{effs}: AMP got closer to its bound, so the measured speedup exceeds "
                "the roofline ratio, which is no upper bound"
            )
        elif r < 1 / 1.1:
            why = f"{effs}: AMP got less close to its bound than the baseline"
        else:
            why = f"{effs}: both about as close to their bounds"
        text = f"{head}. {why}."
        if self.amp_profile is not None and self.baseline_profile is not None:
            text += " " + kernel_time_verdict(self.amp_profile, self.baseline_profile)
        return text


def kernel_time_verdict(amp, baseline) -> str:
    """Where an AMP step's time went, from two layer profiles of one GPU and setting
    (``ampbook.results.LayerProfile``): the kernels' time and the GPU's idle time
    (wall time minus kernel time) apart. AMP's kernels can be faster while its step is
    not: the gain is then lost to idle time (kernel launches, autocast's casts, host
    synchronisations), not to slower kernels."""
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
            "launches and host work), not to slower kernels."
        )
    if ks <= 1.0 / 1.05:
        return f"{facts}: AMP's kernels themselves were slower."
    if ks <= 1.05:
        return f"{facts}: AMP's kernels themselves were no faster."
    return f"{facts}: the step kept the kernels' gain."


def bound_checks(rs: ResultSet, model, devices=None) -> list[BoundCheck]:
    """A ``BoundCheck`` for every complete GPU pair of a results folder (``rs.pairs()``)
    that ran on a GPU of the device table (others are
    left out: there are no ceilings to hold them against). ``model`` is the network the
    runs trained (ERFNet for the runner's records); it is traced on fake tensors at each
    pair's resolution and batch, fp32 against the bound with TF32 as the baseline ran
    it. The folder's layer profiles of the same GPU, batch, resolution and mode as the
    pair's runs are attached to the check."""
    from ampbook.core.devices import find_device, load_devices
    from ampbook.predict import costmodel as cm

    devices = load_devices() if devices is None else devices
    profiles = list(rs.layer_profiles)
    traces: dict[tuple, Any] = {}

    def bound(setting: Setting, precision: str, ceilings) -> float:
        key = (setting.batch_size, setting.height, setting.width, precision)
        if key not in traces:
            traces[key] = cm.trace_step(
                model, setting.batch_size, setting.height, setting.width, precision
            )
        return cm.predict(traces[key], ceilings).min_step_s

    out = []
    for p in rs.pairs():
        dev = find_device(p.setting.device_name, devices)
        if dev is None:
            continue
        base_ceil = cm.Ceilings.from_device(dev, tf32=p.baseline.tf32)
        out.append(
            BoundCheck(
                p,
                dev.key,
                bound(p.setting, "fp32", base_ceil),
                bound(p.setting, p.amp.precision, cm.Ceilings.from_device(dev)),
                _profile_for(profiles, p.setting, p.amp.mode),
                _profile_for(profiles, p.setting, p.baseline.mode),
            )
        )
    return out


def _profile_for(profiles, setting: Setting, mode: str) -> LayerProfile | None:
    """The last layer profile of ``mode`` on the setting's GPU, batch and size."""
    found = None
    for lp in profiles:
        if (
            lp.device_name == setting.device_name
            and (lp.batch_size, lp.height, lp.width)
            == (setting.batch_size, setting.height, setting.width)
            and lp.mode == mode
        ):
            found = lp
    return found


def profile_pair(rs: ResultSet, device: str | None = None, pair=None):
    """The ``(baseline, amp)`` layer profiles of the headline comparison (of ``pair``'s
    modes, device and setting where given), or None. ``rs`` is a ResultSet or its
    ``profile_pairs()``."""
    amp_mode = pair.amp.mode if pair is not None else AMP_MODE
    base_mode = pair.baseline.mode if pair is not None else BASE_MODE
    pps = rs.profile_pairs() if hasattr(rs, "profile_pairs") else list(rs)
    for b, a in pps:
        if a.mode != amp_mode or b.mode != base_mode:
            continue
        if device is not None and a.device_name != device:
            continue
        if pair is not None:
            s = pair.setting
            if (a.device_name, a.batch_size, a.height, a.width) != (
                s.device_name,
                s.batch_size,
                s.height,
                s.width,
            ):
                continue
        return b, a
    return None


def _profiles_source(b, a) -> str:
    from ampbook.core.devices import display_name

    return (
        f"layer profiles on the {display_name(a.device_name)} "
        f"({Path(b.path).name}, {Path(a.path).name})"
    )


def step_alone(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """AMP's step *timed alone* against fp32 with TF32's (baseline wall time over
    AMP's, no loader), from the committed layer profiles: a measured ``Value`` (``x``),
    or None without them."""
    pp = profile_pair(rs, device, pair)
    if pp is None:
        return None
    b, a = pp
    return measured(
        b.step_s / a.step_s,
        f"{_profiles_source(b, a)}: {a.step_s * 1e3:.2f} ms against "
        f"{b.step_s * 1e3:.2f} ms",
        fmt=".2f",
        unit="x",
    )


def kernel_speedup(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """The same profiles' kernel time ratio (baseline over AMP): how much faster AMP's
    kernels were, idle time left out; None without profiles."""
    pp = profile_pair(rs, device, pair)
    if pp is None:
        return None
    b, a = pp
    return measured(
        b.kernel_s / a.kernel_s,
        f"{_profiles_source(b, a)}: kernels {a.kernel_s * 1e3:.2f} ms against "
        f"{b.kernel_s * 1e3:.2f} ms",
        fmt=".2f",
        unit="x",
    )


def gpu_in_short(pairs, profile_pairs=()) -> str:
    """One or two sentences for a chapter's opening box: what the committed GPU runs
    say about AMP's speed (``headline_pair``), with the loader named as the run's
    setting where it set the pace, and, given layer profiles of that GPU and setting
    (``ResultSet.profile_pairs``), the step timed alone and where its kernel gain
    went."""
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
            f" Timed alone (layer profiles): step "
            f"{step_alone(profile_pairs, pair=p)}, kernels "
            f"{kernel_speedup(profile_pairs, pair=p)}; GPU idle "
            f"{a.idle_s * 1e3:.1f} ms against fp32's "
            f"{b.idle_s * 1e3:.1f} ms."
        )
    return text
