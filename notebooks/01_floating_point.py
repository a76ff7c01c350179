# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Floating-point formats, computed
#
# Mixed-precision training moves tensors between number formats that differ in width, range
# and precision. Before measuring what that buys (later chapters), this chapter looks at the
# formats themselves: how each one spends its bits, and what can go wrong when a value does
# not fit. Every result below is computed in a cell, from the bit layouts, from
# `torch.finfo`, or by doing the arithmetic in the format; a number in a sentence is either
# pasted in from such a cell or a definition that the tables show (a bit width, a power of
# two, a format's largest value).
#
# **What you will learn**
#
# - how fp64, fp32, TF32, fp16, bf16 and the two fp8 formats (E4M3, E5M2) lay out sign,
#   exponent and mantissa bits, and how range and precision follow from those bit counts;
# - how far apart neighbouring numbers are at any magnitude;
# - the ways a low-precision format loses information: rounding, swamping (a small update
#   added to a large weight vanishes), accumulation (a long sum stops growing), underflow and
#   overflow;
# - which number claims of the RTX 3070 blog post this book grew from hold, checked in code.
#
# **What you need**: Python with PyTorch. No GPU: everything here is bit arithmetic and runs
# in seconds on a CPU (with `device="cuda"` the accumulation and the fp8 casts run on the
# GPU instead).

# %% tags=["parameters", "remove-cell"]
device = "auto"  # where the accumulation demo runs: "auto", "cpu" or "cuda"
n_accumulate = 20000  # how many small values the accumulation demo adds up
n_samples = 200000  # random weights and gradients for the swamping and underflow demos
seed = 0

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment

# a bad parameter stops the run here, with one line naming it and its rule
params.device("device", device)
params.integer("n_accumulate", n_accumulate, minimum=6000,
               why="the fp16 sum must reach its stall point")
params.integer("n_samples", n_samples, minimum=1000, why="medians per power of two")
params.seed("seed", seed)
print_environment(device)

# %% tags=["hide-cell"]
import inspect
import math

import matplotlib.pyplot as plt
import torch

from ampbook.chapters import ch1
from ampbook.core.devices import pick_device
from ampbook.core.page import bar_style, glue_all, md, md_table, series_style, use_style
from ampbook.core.paths import load_reference
from ampbook.numerics import formats
from ampbook.numerics.formats import FORMATS, bits, decode, round_to, spacing

use_style()
device = pick_device(device)
gen = torch.Generator().manual_seed(seed)
fp16, bf16, fp32 = FORMATS["fp16"], FORMATS["bf16"], FORMATS["fp32"]
style = {name: series_style(i) for i, name in enumerate(FORMATS)}  # one look per format
style.update({torch.float32: style["fp32"], torch.float16: style["fp16"],
              torch.bfloat16: style["bf16"]})

# %% [markdown]
# ## How a float is stored
#
# A binary floating-point number is three unsigned integers packed side by side: a sign bit
# $s$, an exponent field $E$ of $e$ bits and a mantissa (fraction) field $M$ of $m$ bits. For
# an exponent field that is neither all zeros nor all ones the value is
#
# $$x = (-1)^s \, 2^{E - \text{bias}} \left(1 + \frac{M}{2^m}\right),
#   \qquad \text{bias} = 2^{e-1} - 1,$$
#
# a *normal* number with an implicit leading 1, so it carries $m + 1$ significant bits. The
# all-zeros exponent holds the {term}`subnormal` numbers $(-1)^s\, 2^{1 - \text{bias}}\, M / 2^m$,
# which fill the gap between zero and the smallest normal number evenly (and zero itself,
# with either sign). The all-ones exponent is reserved for infinity ($M = 0$) and NaN
# ($M \ne 0$), except in fp8 E4M3, which uses it for numbers and keeps only the all-ones
# exponent and mantissa for NaN, one pattern per sign. The exponent bits set the range,
# the mantissa bits the precision.
#
# {numref}`fig-ch1-bits` draws the seven formats side by side, each bit as one box:

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Bit layouts of the seven formats, one box per bit, to scale: sign (black), exponent (hatched), mantissa (dotted). The number in each field is its width in bits.", "name": "fig-ch1-bits"}}
fig, ax = plt.subplots(figsize=(9, 4.4))
gap = 1.5  # rows apart, so that each field's width label sits clear of the row above
for row, fmt in enumerate(FORMATS.values()):
    y = -gap * row
    fields = [("sign", 1), ("exponent", fmt.exponent_bits),
              ("mantissa", fmt.mantissa_bits)]
    left = 0
    for i, (field, width) in enumerate(fields):
        label = field if row == 0 else None
        ax.barh(y, width, left=left, height=0.7, label=label, **bar_style(i))
        ticks = range(left + 1, left + width)
        ax.vlines(ticks, y - 0.35, y + 0.35, color="white", linewidth=0.8)
        if i > 0:
            ax.text(left + width / 2, y + 0.42, str(width), ha="center", va="bottom",
                    fontsize=8)
        left += width
    ax.text(left + 0.7, y, f"{fmt.bits} bits", va="center", fontsize=8)
ax.set_yticks([-gap * r for r in range(len(FORMATS))], list(FORMATS))
ax.set(xlim=(0, 72), ylim=(-gap * (len(FORMATS) - 1) - 0.6, 1.0))
ax.set_xlabel("bit position (sign first)")
ax.grid(False)
ax.legend(ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
plt.show()

# %% [markdown]
# {term}`TF32` is not a storage format: NVIDIA tensor cores (Ampere and later) read fp32
# matrices and keep only fp16's mantissa width inside the multiplication
# {cite:p}`a100-whitepaper`. PyTorch has no TF32 dtype; whether fp32 matmuls and
# convolutions use it is the `tf32_matmul` / `tf32_cudnn` lines of the environment report
# above.
#
# ## Range and precision of each format
#
# `ampbook.numerics.formats` derives every property from the three bit counts (and the E4M3
# exception). The largest value has the largest normal exponent and all mantissa bits set;
# the smallest normal is $2^{1-\text{bias}}$; the smallest subnormal has only the last
# mantissa bit set; {term}`machine epsilon` $2^{-m}$ is the gap between 1 and the next
# number.
# "Decimal digits" here is $-\log_{10}(\text{eps}) = m \log_{10} 2$ (numpy's
# `finfo.precision` is this rounded down).

# %% tags=["hide-input"]
training = ["fp32", "tf32", "fp16", "bf16"]  # the formats mixed-precision training uses
headers, rows = formats.format_table(training, transpose=True)
md_table(rows, headers, [None] + [".4g"] * len(training))

# %% [markdown]
# Read across the rows: fp16 and TF32 have the same mantissa, so the same epsilon;
# {term}`bf16` and TF32 have fp32's exponent, so (almost) fp32's range. The other three, fp64
# for reference and the two fp8 formats:

# %% tags=["hide-input"]
others = [name for name in FORMATS if name not in training]
headers, rows = formats.format_table(others, transpose=True)
md_table(rows, headers, [None] + [".4g"] * len(others))

# %% [markdown]
# The same values as exact powers of two, written from the layouts:

# %% tags=["hide-input"]
headers, rows = ch1.exact_powers_table()
md_table(rows, headers)

# %% [markdown]
# For the formats PyTorch has a dtype for, the computed values must match `torch.finfo`
# (`tiny` is its name for the smallest normal):

# %% tags=["hide-input"]
headers, rows = ch1.finfo_table()
assert all(r[-1] == "yes" for r in rows)
md_table(rows, headers, [None, None, ".6g", ".6g", ".6g", None])

# %% [markdown]
# ## Reading the bits
#
# `bits(value, name)` rounds a value to a format (to nearest, ties to even, as a cast does)
# and shows the stored pattern as sign, exponent and mantissa; `decode` turns a pattern back
# into a number. Look at the special cases: 65520 in fp16 and anything at or below half the
# smallest subnormal have no pattern of their own, so they become infinity and zero; E4M3 has
# no infinity and, in `ampbook.numerics.formats`, saturates at its largest value (what PyTorch's own
# cast does is version-dependent: see the overflow section).

# %%
examples = [(1.0, "fp16"), (-2.0, "fp16"), (0.1, "fp16"), (0.1, "bf16"),
            (65504.0, "fp16"), (65520.0, "fp16"), (2.0**-24, "fp16"),
            (2.0**-25, "fp16"), (2.0**-26, "fp16"), (-0.0, "fp16"), (math.inf, "fp16"),
            (math.nan, "fp16"), (1 + 2.0**-11, "tf32"), (448.0, "fp8_e4m3"),
            (1000.0, "fp8_e4m3"), (2.0**-9, "fp8_e4m3"), (2.0**-16, "fp8_e5m2"),
            (1e5, "fp8_e5m2")]
rows = [[f"{v:.10g}", name, f"`{bits(v, name)}`", repr(decode(bits(v, name), name))]
        for v, name in examples]
md_table(rows, ["value", "format", "sign exponent mantissa", "stored value"])

# %% [markdown]
# Decoding by hand: fp16's largest pattern has the exponent field one below all ones and
# every mantissa bit set. Subtract the bias from the field and put back the implicit 1:

# %%
sign, exp_field, mant_field = (int(f, 2) for f in "0 11110 1111111111".split())
by_hand = 2.0 ** (exp_field - fp16.bias) * (1 + mant_field / 2**fp16.mantissa_bits)
print(f"2^({exp_field} - {fp16.bias}) * (1 + {mant_field}/{2**fp16.mantissa_bits})"
      f" = {by_hand}")
print(f"decode: {decode('0 11110 1111111111', 'fp16')}, "
      f"torch.finfo(torch.float16).max: {torch.finfo(torch.float16).max}")

# %% [markdown]
# ## The gap between neighbouring numbers
#
# Within one power-of-two interval the numbers of a format are evenly spaced; each interval
# up the spacing doubles. So the *absolute* gap grows with the magnitude while the *relative*
# gap stays between eps/2 and eps, until the subnormal range, where the gap stops shrinking
# and the relative precision runs out. `spacing(x, name)` gives the gap above $|x|$
# ({numref}`fig-ch1-gap`):

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Gap between neighbouring representable numbers against magnitude, for each format (log-log). Each staircase ends at the format's largest value; the flat part on the left is the subnormal range. fp16 and TF32 coincide in the normal range (same mantissa width).", "name": "fig-ch1-gap"}}
x = torch.logspace(-30, 20, 4001, base=2, dtype=torch.float64)
fig, ax = plt.subplots(figsize=(7.5, 4.8))
for i, name in enumerate(FORMATS):
    ax.plot(x, spacing(x, name), label=name, markevery=(40 * i, 400), markersize=4,
            linewidth=1.3, **style[name])
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set(xlabel="magnitude $|x|$", ylabel="gap to the next number")
ax.legend(ncols=2, loc="lower right")
plt.show()

# %% [markdown]
# The same gaps as numbers, at a few magnitudes ("overflow" where the format cannot hold the
# value at all):

# %% tags=["hide-input"]
magnitudes = torch.tensor([1e-6, 1e-3, 1.0, 1000.0, 60000.0, 1e6], dtype=torch.float64)
rows = [[name] + [("overflow" if math.isnan(g) else f"{g:.3g}")
                  for g in spacing(magnitudes, name).tolist()] for name in FORMATS]
md_table(rows, ["format"] + [f"gap at {m:g}" for m in magnitudes.tolist()])

# %% [markdown]
# ## What goes wrong in low precision
#
# ### Rounding: 1 + 2⁻¹¹ in fp16
#
# The fp16 number after 1 is $1 + 2^{-10}$. The value $1 + 2^{-11}$ lies exactly halfway, and
# a tie goes to the neighbour whose last mantissa bit is 0, here 1 itself. A little more than
# half a step rounds up; $1 + 3 \cdot 2^{-11}$, also a tie, rounds up to the even neighbour
# $1 + 2^{-9}$. `round_to` and PyTorch's own fp16 cast agree:

# %%
values = [1 + 2.0**-11, 1 + 1.01 * 2.0**-11, 1 + 3 * 2.0**-11]
rows = [[f"1 + {v - 1:.6g}", f"`{bits(v, 'fp16')}`",
         round_to(torch.tensor([v]), "fp16").item(), torch.tensor(v).half().item()]
        for v in values]
md_table(rows, ["value", "fp16 bits", "round_to fp16", "torch .half()"],
         [None, None, ".10g", ".10g"])

# %% [markdown]
# ### Swamping: a small update to a large weight
#
# An optimizer step adds an update $u$ to a weight $w$. In fp16 the sum is rounded to the
# weight's grid, so an update smaller than half the gap at $w$ disappears (the update is
# {term}`swamped <swamping>`). {cite:t}`micikevicius2018` put the danger point at a weight
# $2^{11}$ times larger than its update: aligning the update with the weight shifts it right
# by 11 or more bits, past fp16's 10-bit mantissa. Here random weights of many magnitudes get
# updates $w / r$ for a range of ratios $r$, added in fp32, bf16 and fp16 by PyTorch's own
# arithmetic ({numref}`fig-ch1-swamping`):

# %%
w = torch.exp2(torch.rand(n_samples, generator=gen) * 8 - 4)  # weights from 1/16 to 16
ratios = torch.logspace(6, 14, 33, base=2)
dtypes = (torch.float32, torch.bfloat16, torch.float16)
lost = {dtype: ch1.lost_updates(w, ratios, dtype) for dtype in dtypes}

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Fraction of weight updates lost entirely (weight unchanged after adding the update) against the ratio weight/update, for updates added in fp16, bf16 and fp32. Random weights between 1/16 and 16; the vertical line is the paper's 2^11.", "name": "fig-ch1-swamping"}}
fig, ax = plt.subplots()
for dtype, frac in lost.items():
    ax.plot(ratios, frac, label=str(dtype)[6:], markersize=4, **style[dtype])
ax.axvline(2**11, color="gray", linewidth=0.8)
ax.set_xscale("log", base=2)
ax.set(xlabel="weight / update", ylabel="fraction of updates lost")
ax.legend()
plt.show()

# %%
f16_some, f16_all = ch1.loss_onset(ratios, lost[torch.float16])
b16_some, b16_all = ch1.loss_onset(ratios, lost[torch.bfloat16])
glue_all(f16_some=f16_some, f16_all=f16_all, b16_some=b16_some, b16_all=b16_all,
         f32_lost=max(lost[torch.float32]))
print(f"fp16: first loss at {f16_some:g}, nearly all from {f16_all:g}; "
      f"bf16: {b16_some:g} and {b16_all:g}")

# %% [markdown]
# In fp16 the first updates vanish at a ratio of {glue:text}`f16_some:.0f` and 99.9% or
# more of them from {glue:text}`f16_all:.0f`; in between it depends on where the weight sits
# in its power-of-two interval (the gap is the same across the interval, the weight is not).
# bf16, with 7 mantissa bits instead of 10, starts losing updates at
# {glue:text}`b16_some:.0f` and loses nearly all from {glue:text}`b16_all:.0f`. fp32 loses at
# most {glue:text}`f32_lost:.0%` of them in this range. This is why an optimizer step
# must not add updates to fp16 weights. With PyTorch's native AMP the weights are never fp16
# in the first place: the parameters stay fp32, autocast casts them to fp16 for each op that
# runs in fp16, and the optimizer adds the updates to the fp32 parameters
# ({doc}`04_loss_scaling` shows this on ERFNet). Keeping an fp32 "master copy" beside fp16
# weights is what the paper, and NVIDIA's older apex library {cite:p}`apex-amp`, did.
#
# ### Accumulation: a long sum in fp16
#
# The same effect stops a long sum. Each term is small; once the running sum is large enough,
# half the gap at the sum exceeds the terms and every addition rounds back to the same sum.
# The terms here are multiples of $2^{-18}$ below $2^{-10}$, exactly representable in every
# format, so each accumulator adds the very same numbers and only the rounding of the sum
# differs ({numref}`fig-ch1-accumulation`). The whole experiment is this function from
# `ampbook.numerics.formats`:

# %%
print(inspect.getsource(formats.running_sum))

# %%
terms = torch.randint(1, 256, (n_accumulate,), generator=gen).double() * 2.0**-18
exact = terms.cumsum(0)
sums = {dtype: formats.running_sum(terms, dtype, device)
        for dtype in (torch.float32, torch.float16, torch.bfloat16)}

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Running sum of small positive terms, added one at a time into an fp32, fp16 or bf16 accumulator, against the exact sum. The low-precision sums stall once half the gap between neighbouring numbers exceeds the terms.", "name": "fig-ch1-accumulation"}}
fig, ax = plt.subplots()
steps = torch.arange(1, n_accumulate + 1)
ax.plot(steps, exact, label="exact", color="gray", linewidth=3, alpha=0.5)
for i, (dtype, trace) in enumerate(sums.items()):
    ax.plot(steps, trace, label=f"{str(dtype)[6:]} accumulator", markersize=5,
            markevery=(i * n_accumulate // 30, n_accumulate // 10), **style[dtype])
ax.set(xlabel="terms added", ylabel="running sum")
ax.legend()
plt.show()

# %%
library_sum = torch.sum(terms.to(device, torch.float16)).item()
rows = [[str(d)[6:], s[-1].item()] for d, s in sums.items()]
rows += [["torch.sum of the fp16 terms", library_sum]]
rows = [r + [r[1] / exact[-1].item() - 1] for r in rows]
md_table(rows, ["accumulator", "final sum", "relative error"], [None, ".6g", "+.2%"])

# %%
largest = terms.max().item()
library_error = abs(library_sum / exact[-1].item() - 1)
glue_all(exact_sum=exact[-1].item(), largest_term=largest,
         stall16=ch1.stall_point("fp16", largest),
         stall_bf16=ch1.stall_point("bf16", largest),
         library_error=library_error, library_error_roundings=library_error / fp16.eps)
print(f"torch.sum error: {library_error / fp16.eps:.2f} fp16 epsilons")

# %% [markdown]
# The exact sum is {glue:text}`exact_sum:.6g`. From a running sum of
# {glue:text}`stall16:g` on, half of fp16's gap is at least the largest term
# ({glue:text}`largest_term:.3g`), so no addition changes the fp16 sum any more; bf16 reaches
# that point at {glue:text}`stall_bf16:g`. PyTorch's own `torch.sum` over the same fp16
# tensor errs by {glue:text}`library_error_roundings:.2f` fp16 epsilons: its kernels add in
# fp32 and round only the result (if the line above printed an error of several epsilons, the
# kernel on your device did not). The RTX 3070 blog post's remedy, fp16 products with fp32
# accumulation, is the same idea in hardware ({doc}`02_tensor_cores`).
#
# ### Underflow: gradients below 2⁻²⁴
#
# Gradients are often tiny. fp16's normal range ends at $2^{-14}$; below it the subnormals
# keep fewer and fewer significant bits, down to the smallest subnormal $2^{-24}$. A value
# below half of that, $2^{-25}$, rounds to zero, and so does $2^{-25}$ itself: it lies exactly
# halfway between 0 and $2^{-24}$, and the tie goes to the even neighbour, 0 (whose last
# mantissa bit is 0). Anything above $2^{-25}$, however little, rounds up to $2^{-24}$. bf16
# and fp32 share an exponent range reaching far lower.

# %%
half_sub = fp16.smallest_subnormal / 2
small = [1e-5, 2.0**-20, 1e-7, 2.0**-24, 3e-8, half_sub * (1 + 2.0**-20), half_sub,
         1e-8, 1e-10]
rows = [[f"{v:.10g}", torch.tensor(v).half().item()]
        + [round_to(torch.tensor([v], dtype=torch.float64), n).item()
           for n in ("fp16", "bf16", "fp8_e5m2")] for v in small]
md_table(rows, ["value", "torch .half()", "round_to fp16", "round_to bf16", "fp8_e5m2"],
         [None, ".4g", ".4g", ".4g", ".4g"])

# %%
tie = torch.tensor([half_sub, half_sub * (1 + 2.0**-20)])
glue_all(half_sub=half_sub, tie_torch=tie.half()[0].item(),
         tie_emulated=round_to(tie, "fp16")[0].item(), above_torch=tie.half()[1].item())

# %% [markdown]
# In the table, $2^{-25}$ = {glue:text}`half_sub:.4g` becomes {glue:text}`tie_torch:g` in
# PyTorch's cast ({glue:text}`tie_emulated:g` in `round_to`), and the value just above it
# becomes {glue:text}`above_torch:.4g` = $2^{-24}$.
#
# How much of each value survives, for random magnitudes spread evenly (on a log scale) over
# the range where small gradients live ({numref}`fig-ch1-underflow`). The relative rounding
# error is at most eps/2 (the {term}`unit roundoff`) for normal numbers and reaches 1 when a
# value becomes zero:

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Median relative rounding error against magnitude for fp16, bf16 and fp8 E5M2, over random values in each power-of-two interval. The error grows where a format's subnormal range starts and reaches 1 (the value is lost) at half its smallest subnormal.", "name": "fig-ch1-underflow"}}
g = torch.exp2(torch.rand(n_samples, generator=gen, dtype=torch.float64) * 30 - 36)
octave = torch.floor(torch.log2(g))  # magnitudes 2^-36 .. 2^-6
lows = torch.unique(octave)
fig, ax = plt.subplots()
for name in ("fp16", "bf16", "fp8_e5m2"):
    rel = (round_to(g, name) - g).abs() / g
    median = [rel[octave == k].median().item() for k in lows]
    ax.plot(torch.exp2(lows + 0.5), median, label=name, markersize=4, **style[name])
ax.axvline(2.0**-24, color="gray", linewidth=0.8)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set(xlabel="magnitude", ylabel="median relative error")
ax.legend()
plt.show()

# %% tags=["hide-input"]
glue_all(flushed=(round_to(g, "fp16") == 0).double().mean().item(),
         below=(g < fp16.smallest_subnormal).double().mean().item(),
         flushed_bf16=(round_to(g, "bf16") == 0).double().mean().item())

# %% [markdown]
# Of these log-uniform magnitudes, {glue:text}`flushed:.1%` become zero in fp16 (those at or
# below half the smallest subnormal; {glue:text}`below:.1%` lie below the smallest subnormal
# itself) and {glue:text}`flushed_bf16:.1%` in bf16. The fraction for a real network depends
# on its gradients: {cite:t}`micikevicius2018` report how many of a network's activation
# gradients fall below fp16's range, and scale the loss (hence every gradient) up by a
# {term}`loss scale` to lift them into it.
#
# ### Overflow past 65504, and what bf16 gives up instead
#
# Past fp16's largest value, from its maximum plus half a step on, a value becomes infinity,
# and so does a product or an exponential that lands there, e.g. $300^2$ or $e^{12}$ (a
# softmax computed without subtracting the maximum first). bf16 moves bits from the mantissa
# to the exponent, so it reaches nearly as far as fp32 and pays in precision:

# %%
big = torch.tensor([65504.0, 65519.0, 65520.0, 300.0**2, math.exp(12.0), 1e6])
rows = [[f"{v:.6g}", round_to(torch.tensor([v]), "fp16").item(),
         round_to(torch.tensor([v]), "bf16").item()] for v in big.tolist()]
rows = [r + [r[2] / float(r[0]) - 1] for r in rows]
md_table(rows, ["value", "fp16", "bf16", "bf16 relative error"],
         [None, ".6g", ".6g", "+.3%"])

# %%
a = torch.tensor(300.0, dtype=torch.float16)
e12 = torch.tensor(12.0)
print(f"torch: 300*300 in float16 = {(a * a).item()}, "
      f"exp(12) in float16 = {torch.exp(e12.half()).item()}, "
      f"in bfloat16 = {torch.exp(e12.bfloat16()).item()}")
glue_all(bf16_max=bf16.max, bf16_eps=bf16.eps, fp16_eps=fp16.eps,
         eps_ratio=bf16.eps / fp16.eps, bf16_digits=bf16.decimal_digits,
         fp16_digits=fp16.decimal_digits)

# %% [markdown]
# bf16's largest value is {glue:text}`bf16_max:.4g` against fp16's 65504, but its epsilon is
# {glue:text}`bf16_eps:g` against {glue:text}`fp16_eps:g`: {glue:text}`eps_ratio:g` times
# coarser, about {glue:text}`bf16_digits:.1f` decimal digits instead of
# {glue:text}`fp16_digits:.1f`. With bf16 a model rarely overflows or underflows and needs no
# loss scaling, but every rounding (and every swamped update, see above) is larger.
#
# ### fp8 overflow: saturate or NaN?
#
# {term}`E4M3 <fp8 E4M3>` has no infinity, so a cast of a value past its largest (448) must
# do something else: *saturate* (give ±448) or give NaN. The OCP 8-bit floating point
# specification allows both modes {cite:p}`ocp-ofp8`. What PyTorch's eager cast does has
# changed over versions: it did not saturate (values past the range became NaN) while
# `torch.compile`'s Triton casts did {cite:p}`pytorch-ao-1912`; a pull request merged in
# April 2026 (PyTorch 2.12 and later) made eager casts saturate finite overflows, in the C++
# conversion code that CPU kernels use {cite:p}`pytorch-pr-178817,pytorch-ao-4364`.
# {term}`E5M2 <fp8 E5M2>` has infinities and overflows to them. Infinity and NaN are
# inputs of their own, apart from a finite value that is too large: a cast that saturates
# may send ±inf to ±448 or to NaN, and NaN has nowhere to go but NaN. What this torch's own
# casts do on this chapter's device (run it with `device="cuda"` to see a GPU's), for a
# finite value past each format's range (twice its largest value, or float32's largest for
# bf16), for ±inf and for NaN:

# %%
special_names = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
specials = {name: ch1.cast_specials(FORMATS[name].torch_dtype, device)
            for name in special_names}
rows = [[name, ch1.overflow_probe(name)]
        + [f"{v:g}" + (" (max)" if out.endswith("max") else "")
           for v, out in specials[name].values()] for name in special_names]
md_table(rows, ["cast to", "finite probe"] + list(ch1.SPECIAL_INPUTS),
         [None, ".4g"] + [None] * 4)

# %%
md(ch1.specials_report(specials, device))

# %% [markdown]
# Saturation hides an overflow as a wrong but finite number; NaN makes it visible and
# poisons everything downstream. Where a cast sends inf to the largest finite value (the
# lines above say whether this torch does so for E4M3), an overflow that already happened
# upstream, an inf in fp32, leaves the cast as an ordinary large number, and no later check
# for inf sees it; where the cast gives NaN instead, the overflow stays visible. Code that
# casts to fp8 (scaled matmuls) therefore scales the tensor into range first and clamps
# explicitly, rather than relying on either rule.
#
# ## The post's numbers, checked
#
# The RTX 3070 blog post quotes the sizes, ranges and rounding errors of fp16 and fp32
# (stored in `data/reference/seed_post.yml`). Each claim beside the value computed from the
# formats, with a verdict worked out by `ch1.claim_verdict`: a claim agrees when it
# matches to the digits it gives. For the rounding errors the true value is the largest
# relative error of rounding to nearest (the unit roundoff, half of machine epsilon).
# {doc}`02_tensor_cores` checks the post's tensor-core claims.

# %%
claims = load_reference("seed_post")["claims"]
# claim -> (what is true, {another quantity the claimed number may be: its value})
true = {"fp16_bytes": (fp16.bits / 8, {}), "fp32_bytes": (fp32.bits / 8, {}),
        "fp16_rounding_error": (fp16.unit_roundoff, {"fp16's epsilon": fp16.eps}),
        "fp32_rounding_error": (fp32.unit_roundoff, {"fp32's epsilon": fp32.eps}),
        "fp16_min_positive": (fp16.smallest_subnormal, {}), "fp16_max": (fp16.max, {}),
        "fp32_min_positive": (fp32.smallest_subnormal, {}),
        "fp32_max": (fp32.max, {"$2^{127}$, fp32's largest power of two": 2.0**127}),
        "paper_lost_below": (fp16.smallest_subnormal, {})}

# %% tags=["hide-input"]
rows = [[key.replace("_", " "), claims[key], value,
         ch1.claim_verdict(claims[key], value, others)]
        for key, (value, others) in true.items()]
md_table(rows, ["claim", "the post says", "true value", "verdict"],
         [None, ".4g", ".6g", None])

# %% tags=["hide-input"]
glue_all(fp32_max=fp32.max, post_fp32_max=claims["fp32_max"], pow127=2.0**127,
         post_f16_err=claims["fp16_rounding_error"],
         post_f32_err=claims["fp32_rounding_error"],
         f16_u=fp16.unit_roundoff, f32_u=fp32.unit_roundoff)
failed = [k.replace("_", " ") for k, (v, others) in true.items()
          if ch1.claim_verdict(claims[k], v, others) != "agrees"]
md("Claims the table does not pass: " + ", ".join(failed or ["none"]) + ".")

# %% [markdown]
# The claims the table does not pass (named above), looked at closer:
#
# - **fp32 maximum.** The largest fp32 value is $2^{127}(2 - 2^{-23})$ =
#   {glue:text}`fp32_max:.6g`. The post's {glue:text}`post_fp32_max:g` is $2^{127}$ =
#   {glue:text}`pow127:.4g`, the largest power of two (exponent field all ones but one,
#   mantissa zero): half the true maximum.
# - **Rounding error.** The post's fp16 {glue:text}`post_f16_err:g` ($2^{-10}$) and fp32
#   {glue:text}`post_f32_err:.4g` ($2^{-23}$) are the machine epsilons, the gaps above 1.
#   Rounding to nearest errs by at most half a gap, so the largest relative rounding error
#   (the unit roundoff) is {glue:text}`f16_u:g` for fp16 and {glue:text}`f32_u:.4g` for fp32.
#
# The paper's "lost below $2^{-24}$" agrees as a number, with one refinement from the
# underflow section: values between $2^{-25}$ and $2^{-24}$ round up to $2^{-24}$; only those
# at or below $2^{-25}$ become zero.
#
# ## Summary
#
# - A format's exponent bits fix its range and its mantissa bits its precision; every entry
#   of the tables above follows from the two counts, and agrees with `torch.finfo`.
# - fp16 has fp32's mantissa cut by more than half and a much shorter exponent: small
#   gradients underflow, large activations overflow, and sums and weight updates lose small
#   contributions.
# - bf16 keeps fp32's range and gives up even more precision; TF32 keeps fp32's range with
#   fp16's precision, inside tensor-core matmuls only; the fp8 formats trade both away
#   further; what a cast past E4M3's range gives, and what it does with inf, depends on the
#   PyTorch version (this one's casts are probed above).
# - Mixed precision answers each failure: fp32 accumulation for sums, fp32 parameters for the
#   updates (with native AMP the parameters simply stay fp32), loss scaling for underflow.
#   Later chapters measure them.
# - Of the blog post's numbers, its fp32 maximum is off by a factor of two and its "rounding
#   errors" are machine epsilons, twice the worst-case rounding error; the rest hold.
#
# ## Exercises
#
# 1. Show the fp16, bf16 and fp8 E4M3 bits of 0.1 with `bits`, decode them, and compute each
#    relative error. Which is within the unit roundoff of its format?
#
#    ```{dropdown} Hint
#    `decode(bits(0.1, name), name)` gives the stored value; compare
#    `abs(stored - 0.1) / 0.1` with `FORMATS[name].unit_roundoff`. Rounding to nearest keeps
#    every normal number within it, so all three should be.
#    ```
# 2. Find the smallest positive `x` for which `1 + x` in fp16 is not 1 (bisect with
#    `round_to`). Explain the result with ties-to-even.
#
#    ```{dropdown} Hint
#    $1 + 2^{-11}$ is exactly halfway between 1 and the next fp16 number and rounds to the
#    even one, 1. Any $x$ above $2^{-11}$ rounds up, so the answer is the next number above
#    $2^{-11}$ in the arithmetic you bisect in (float64 here), not $2^{-11}$ itself.
#    ```
# 3. Predict from the gap figure where the fp16 running sum stalls if the terms are ten times
#    larger, then change the cell and check. Then write Kahan (compensated) summation with an
#    fp16 accumulator and an fp16 compensation term: how close does it get?
#
#    ```{dropdown} Hint
#    The sum stalls once half the gap at the sum reaches the largest term; the gap doubles
#    with each power of two, so ten times larger terms move the stall point up by three or
#    four powers of two (`ch1.stall_point` computes it). Kahan's compensation term keeps
#    the part of each addition that the rounding threw away and adds it back in the next.
#    ```
# 4. Read off the swamping figure the ratio at which bf16 starts losing updates and relate it
#    to its mantissa width. What would the ratio be for TF32?
#
#    ```{dropdown} Hint
#    An update vanishes when it is at most half the gap at the weight, and the gap is between
#    $2^{-m-1}$ and $2^{-m}$ times the weight for $m$ mantissa bits. TF32 has fp16's ten.
#    ```
# 5. The FP8 paper {cite:p}`micikevicius2022fp8` uses E4M3 for weights and activations and
#    E5M2 for gradients. Using the tables above, explain why.
#
#    ```{dropdown} Hint
#    Compare the two formats' machine epsilon and their smallest and largest values: which
#    one spans more binades, and which one rounds more finely within a binade? Gradients
#    spread over many binades (chapter 4's histograms).
#    ```
