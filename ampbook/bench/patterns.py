"""AMP in your own loop (chapter 8): the patterns of PyTorch's AMP examples as short
loops the chapter shows from their source, and a check per pattern that runs it at a
tiny size and says whether it does what the chapter says.

Each loop is a plain function a reader can paste (``accumulate_step``,
``two_models_step``, ``penalty_step``, ``exp_sum_log``, ``predict``, ``train_step``,
``checkpoint_blocks``); each check (``check_*``) takes the loop as an argument, so a
test can hand it a variant written wrong and see it fail. A check returns a result
whose ``ok`` says whether the pattern held and whose ``verdict()`` says what was
measured. The models are tiny (``TinyNet``): fully convolutional, per-pixel
cross-entropy as ERFNet's, optional batch norm.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from statistics import median

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.core.precision import torch_name
from ampbook.measure.memory import AllocatedBytesMeter
from ampbook.numerics.formats import get_format

CLASSES = 4


class TinyNet(nn.Module):
    """Three convolutions to per-pixel class scores (``N,3,H,W -> N,CLASSES,H,W``);
    ``batch_norm=True`` puts a BatchNorm2d after the first."""

    def __init__(self, channels: int = 8, batch_norm: bool = False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels) if batch_norm else nn.Identity()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.head = nn.Conv2d(channels, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv1(x)))
        return self.head(F.relu(self.conv2(x)))


def tiny_model(seed: int = 0, **kw) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(**kw)


def tiny_batch(n: int, size: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``n`` random images (``n,3,size,size``) and per-pixel labels."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, size, size, generator=g)
    labels = torch.randint(0, CLASSES, (n, size, size), generator=g)
    return images, labels


def scaler_for(device_type: str, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A GradScaler for fp16; a disabled one (it passes everything through) for fp32
    and bf16."""
    return torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over max |b| (0 when both are zero)."""
    top = b.abs().max().item()
    return (a - b).abs().max().item() / top if top else (a - b).abs().max().item()


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().float() for p in model.parameters()])


def dtype_label(dtype: torch.dtype | None) -> str:
    return "fp32" if dtype is None else torch_name(dtype)


# --- gradient accumulation ------------------------------------------------------------


def accumulate_step(model, optimizer, scaler, micro_batches, device_type, dtype):
    """One optimizer step over a list of (images, labels) micro-batches."""
    n = len(micro_batches)
    optimizer.zero_grad()
    for images, labels in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels) / n  # the mean over all
        scaler.scale(loss).backward()  # gradients add up across micro-batches
    scaler.step(optimizer)
    scaler.update()


@dataclass
class Comparison:
    """Two ways of doing the same thing, compared: ``difference`` (max |a - b| over
    max |b|, or as ``what`` says) against ``tolerance``."""

    what: str
    dtype: str
    difference: float
    tolerance: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.difference <= self.tolerance

    def verdict(self) -> str:
        word = "within" if self.ok else "outside"
        return (
            f"{self.what} ({self.dtype}): measured difference {self.difference:.2e}, "
            f"{word} the tolerance {self.tolerance:.1e}{self.note}."
        )


def rounding_tolerance(dtype: torch.dtype | None, units: float | None = None) -> float:
    """How far two results that differ only by rounding may drift apart, relative to
    the largest value: ``units`` unit roundoffs of ``dtype``, by default 64 of fp32's
    for fp32 (long fp32 sums added in another order) and 4 of the 16-bit type's under
    autocast (its rounding of the forward's activations)."""
    fmt = get_format(dtype or torch.float32)
    return (units or (64.0 if dtype is None else 4.0)) * fmt.unit_roundoff


def check_accumulation(
    step=accumulate_step,
    dtype: torch.dtype | None = None,
    micro: int = 4,
    micro_batch: int = 2,
    size: int = 16,
    batch_norm: bool = False,
    device_type: str = "cpu",
    seed: int = 0,
) -> Comparison:
    """``step`` over ``micro`` micro-batches against ``step`` over one batch
    ``micro`` times larger, from the same weights, with SGD (an update proportional
    to the gradient; Adam's near scale-invariance would hide a wrong factor): the
    relative difference of the two updates."""
    images, labels = tiny_batch(micro * micro_batch, size, seed)
    chunks = list(zip(images.split(micro_batch), labels.split(micro_batch)))
    updates = []
    for batches in (chunks, [(images, labels)]):
        model = tiny_model(seed, batch_norm=batch_norm)
        before = _flat(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        step(
            model,
            optimizer,
            scaler_for(device_type, dtype),
            batches,
            device_type,
            dtype,
        )
        updates.append(_flat(model) - before)
    note = " (batch norm: each micro-batch normalised by its own statistics)" * (
        batch_norm
    )
    return Comparison(
        f"{micro} micro-batches of {micro_batch} vs one batch of {micro * micro_batch}",
        dtype_label(dtype),
        _relative(*updates),
        rounding_tolerance(dtype),
        note,
    )


# --- several models, losses and optimizers, one scaler --------------------------------


def coupled_losses(out0, out1, labels):
    """Each loss depends on both models (as in PyTorch's AMP examples)."""
    loss0 = F.cross_entropy(2 * out0 + 3 * out1, labels)
    loss1 = F.cross_entropy(3 * out0 - 5 * out1, labels)
    return loss0, loss1


def separate_losses(out0, out1, labels):
    """Each loss depends on one model only."""
    return F.cross_entropy(out0, labels), F.cross_entropy(out1, labels)


def two_models_step(
    models,
    optimizers,
    scaler,
    images,
    labels,
    device_type,
    dtype,
    losses=coupled_losses,
):
    for optimizer in optimizers:
        optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        out0, out1 = models[0](images), models[1](images)
        loss0, loss1 = losses(out0, out1, labels)
    scaler.scale(loss0).backward(retain_graph=True)  # one scale() per loss
    scaler.scale(loss1).backward()
    for optimizer in optimizers:
        scaler.step(optimizer)  # one step() per optimizer: each checks its own grads
    scaler.update()  # one update() per iteration, after every step


PLANT = 1e30  # finite in fp32; its gradient overflows fp16


def planted(losses):
    """``losses`` with the second one multiplied by ``PLANT``."""

    def with_overflow(out0, out1, labels):
        loss0, loss1 = losses(out0, out1, labels)
        return loss0, loss1 * PLANT

    return with_overflow


@dataclass
class SharedScaler:
    losses: str
    skipped: tuple[bool, bool]  # did each optimizer skip its step
    scale_before: float
    scale_after: float
    expect_both: bool  # each loss reaches both models

    @property
    def ok(self) -> bool:
        halved_once = self.scale_after == self.scale_before * 0.5
        both = self.skipped == (True, True)
        alone = self.skipped == (False, True)
        return halved_once and (both if self.expect_both else alone)

    def verdict(self) -> str:
        which = {
            (True, True): "both optimizers skipped",
            (False, True): "only the second optimizer skipped",
            (True, False): "only the first optimizer skipped",
            (False, False): "neither optimizer skipped",
        }[self.skipped]
        return (
            f"{self.losses} losses, overflow planted in the second: {which}; the scale "
            f"went from {self.scale_before:g} to {self.scale_after:g} "
            f"({'halved once, as it should' if self.ok else 'not as it should'})."
        )


def check_shared_scaler(
    step=two_models_step,
    losses=coupled_losses,
    dtype: torch.dtype = torch.float16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
) -> SharedScaler:
    """One iteration of ``step`` on two tiny models with an overflow planted in the
    second loss: which optimizers skipped, and what the one scaler's scale did."""
    models = [tiny_model(seed), tiny_model(seed + 1)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scaler = torch.amp.GradScaler(device_type)
    before = [_flat(m) for m in models]
    images, labels = tiny_batch(2, size, seed)
    s0 = scaler.get_scale()
    step(
        models,
        optimizers,
        scaler,
        images,
        labels,
        device_type,
        dtype,
        losses=planted(losses),
    )
    skipped = tuple(bool(torch.equal(_flat(m), b)) for m, b in zip(models, before))
    return SharedScaler(
        "coupled" if losses is coupled_losses else "separate",
        skipped,
        s0,
        scaler.get_scale(),
        losses is coupled_losses,
    )


# --- gradient penalty -----------------------------------------------------------------


def penalty_step(model, optimizer, scaler, images, labels, device_type, dtype):
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    params = list(model.parameters())
    scaled = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    grads = [g / scaler.get_scale() for g in scaled]  # unscale before using them
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + penalty
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return penalty.detach()


def penalty_step_without_unscaling(
    model, optimizer, scaler, images, labels, device_type, dtype
):
    """``penalty_step`` written wrong: the penalty of the scaled gradients."""
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    params = list(model.parameters())
    grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + penalty
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return penalty.detach()


def check_penalty(
    step=penalty_step,
    dtype: torch.dtype = torch.float16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
    units: float | None = None,
) -> Comparison:
    """The penalty ``step`` computes under AMP with a GradScaler against the same
    step in fp32 without one (scale 1): their relative difference, against
    ``rounding_tolerance(dtype, units)``."""
    images, labels = tiny_batch(2, size, seed)
    values = []
    for d in (dtype, None):
        model = tiny_model(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = (
            scaler_for(device_type, d)
            if d is None
            else torch.amp.GradScaler(device_type, init_scale=2.0**10)
        )
        values.append(
            step(model, optimizer, scaler, images, labels, device_type, d).float()
        )
    amp, fp32 = values
    return Comparison(
        f"gradient penalty {amp.item():.4g} (AMP, scale 1024) vs {fp32.item():.4g} "
        "(fp32)",
        dtype_label(dtype),
        _relative(amp, fp32),
        rounding_tolerance(dtype, units),
    )


# --- a custom autograd Function -------------------------------------------------------


def exp_sum_log(device_type, cast_inputs=torch.float32):
    """log(sum(exp(x))) over the last dimension, written naively (exp overflows fp16
    above 11.1), as an autograd Function that runs in fp32 under autocast."""

    class ExpSumLog(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type=device_type, cast_inputs=cast_inputs)
        def forward(ctx, x):
            ExpSumLog.received = x.dtype  # what the forward got (for the check)
            # exp on the tensor as received: CUDA's autocast would run exp in fp32
            # of its own accord (its fp32 list), the CPU's would not
            with torch.autocast(device_type, enabled=False):
                e = x.exp()
            total = e.sum(-1, keepdim=True)
            ctx.save_for_backward(e, total)
            return total.log().squeeze(-1)

        @staticmethod
        @torch.amp.custom_bwd(device_type=device_type)
        def backward(ctx, grad):
            e, total = ctx.saved_tensors
            return grad.unsqueeze(-1) * e / total

    return ExpSumLog


@dataclass
class FunctionCheck:
    cast_inputs: str
    received: str  # the dtype the forward received
    output_finite: bool
    grad_dtype: str  # the dtype of the gradient reaching the layer before

    @property
    def ok(self) -> bool:
        return self.received == "float32" and self.output_finite

    def verdict(self) -> str:
        fin = "finite" if self.output_finite else "not finite (exp overflowed)"
        return (
            f"cast_inputs={self.cast_inputs}: the forward received {self.received}, "
            f"its output was {fin}, the gradient left it in {self.grad_dtype}."
        )


def check_custom_function(
    make=exp_sum_log,
    cast_inputs=torch.float32,
    dtype: torch.dtype = torch.float16,
    device_type: str = "cpu",
    seed: int = 0,
) -> FunctionCheck:
    """A Linear layer under autocast (16-bit output, values near 12) feeding the
    Function ``make(device_type, cast_inputs)``: what its forward received."""
    torch.manual_seed(seed)
    layer = nn.Linear(8, 8)
    x = torch.full((2, 8), 1.0)
    grad_dtype: list[torch.dtype] = []
    with torch.autocast(device_type, dtype=dtype):
        h = layer(x) * 0 + 12.0  # a 16-bit activation of 12: exp(12) > 65504
        h.register_hook(lambda g: grad_dtype.append(g.dtype))
        function = make(device_type, cast_inputs)
        out = function.apply(h)
    out.float().sum().backward()
    label = "None" if cast_inputs is None else f"torch.{torch_name(cast_inputs)}"
    return FunctionCheck(
        label,
        torch_name(function.received),
        bool(torch.isfinite(out).all()),
        torch_name(grad_dtype[0]),
    )


# --- inference ------------------------------------------------------------------------


def predict(model, images, device_type, dtype):
    model.eval()  # batch norm uses its running statistics
    with torch.inference_mode(), torch.autocast(device_type, dtype=dtype):
        return model(images).softmax(dim=1)  # fp32 on CUDA; on a CPU, its input's dtype


@dataclass
class InferenceCheck:
    dtype: str
    out_dtype: str
    difference: float  # max |p_amp - p_fp32| of the class probabilities
    tolerance: float
    fp32_bytes: int  # peak bytes of tensors made during the fp32 forward
    amp_bytes: int

    @property
    def ok(self) -> bool:
        return self.difference <= self.tolerance and self.amp_bytes < self.fp32_bytes

    def verdict(self) -> str:
        return (
            f"{self.dtype}: probabilities ({self.out_dtype}) differ from fp32's by at "
            f"most {self.difference:.2e} (tolerance {self.tolerance:.1e}); peak "
            f"allocated {self.amp_bytes / 2**10:.0f} KiB against fp32's "
            f"{self.fp32_bytes / 2**10:.0f} KiB "
            f"({self.amp_bytes / self.fp32_bytes:.2f}x)."
        )


def check_inference(
    infer=predict,
    dtype: torch.dtype = torch.bfloat16,
    batch: int = 4,
    size: int = 32,
    channels: int = 16,
    device_type: str = "cpu",
    seed: int = 0,
) -> InferenceCheck:
    """``infer`` under autocast against the fp32 forward of the same trained-looking
    model (batch norm with running statistics of its own, in eval mode): the largest
    difference of the class probabilities, and the peak bytes allocated
    (``AllocatedBytesMeter``) by each forward. Tolerance: ``rounding_tolerance``."""
    model = tiny_model(seed, channels=channels, batch_norm=True)
    images, _ = tiny_batch(batch, size, seed)
    model.norm.running_mean.uniform_(-0.5, 0.5)  # statistics unlike one batch's
    model.norm.running_var.uniform_(0.5, 2.0)
    model.eval()
    with torch.inference_mode(), AllocatedBytesMeter() as m32:
        reference = model(images).softmax(dim=1)
    with AllocatedBytesMeter() as mamp:
        probs = infer(model, images, device_type, dtype)
    return InferenceCheck(
        torch_name(dtype),
        torch_name(probs.dtype),
        (probs.float() - reference).abs().max().item(),
        rounding_tolerance(dtype),
        m32.peak_bytes,
        mamp.peak_bytes,
    )


# --- DistributedDataParallel on two gloo processes ------------------------------------


def train_steps(model, optimizer, scaler, batches, device_type, dtype):
    """The minimal AMP loop (chapter 3) over ``batches``; with DDP ``model`` is the
    DDP-wrapped one and each process passes its own share of every batch."""
    for images, labels in batches:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()  # DDP averages the gradients across processes
        scaler.step(optimizer)
        scaler.update()


def _ddp_batches(steps: int, batch: int, size: int, seed: int):
    return [tiny_batch(batch, size, seed + i) for i in range(steps)]


def ddp_worker(
    rank: int,
    world: int,
    init: str,
    out: str,
    dtypes: list,
    steps: int,
    batch: int,
    size: int,
    seed: int,
    wrap: bool,
) -> None:
    """One process of ``check_ddp``: trains a tiny model per dtype on its share of
    each batch (rank ``r`` takes rows ``r::world``), wrapped in DDP when ``wrap``;
    rank 0 saves the weights."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init}", rank=rank, world_size=world
    )
    try:
        weights = {}
        for d in dtypes:
            dtype = None if d is None else getattr(torch, d)
            net = tiny_model(seed)
            model = nn.parallel.DistributedDataParallel(net) if wrap else net
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            shares = [
                (x[rank::world], y[rank::world])
                for x, y in _ddp_batches(steps, batch, size, seed)
            ]
            train_steps(
                model, optimizer, scaler_for("cpu", dtype), shares, "cpu", dtype
            )
            weights[str(d)] = _flat(net)
        if rank == 0:
            torch.save(weights, out)
    finally:
        dist.destroy_process_group()


@dataclass
class DDPCheck:
    results: list[Comparison]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def check_ddp(
    dtypes=(None, torch.bfloat16),
    world: int = 2,
    steps: int = 3,
    batch: int = 4,
    size: int = 8,
    seed: int = 0,
    wrap: bool = True,
) -> DDPCheck:
    """``world`` gloo processes (``torch.multiprocessing``, spawned) train with
    ``train_steps`` on their shares of ``steps`` batches of ``batch``; this process
    trains the same model on the whole batches. The weights after, compared per dtype
    (``rounding_tolerance``, relative to the largest weight)."""
    import torch.multiprocessing as mp

    names = [None if d is None else torch_name(d) for d in dtypes]
    ours = {}
    for d, name in zip(dtypes, names):  # one process, the whole batches
        net = tiny_model(seed)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        train_steps(
            net,
            optimizer,
            scaler_for("cpu", d),
            _ddp_batches(steps, batch, size, seed),
            "cpu",
            d,
        )
        ours[str(name)] = _flat(net)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        init, out = os.path.join(tmp, "init"), os.path.join(tmp, "weights.pt")
        mp.start_processes(
            ddp_worker,
            args=(world, init, out, names, steps, batch, size, seed, wrap),
            nprocs=world,
            # spawned, not forked: a process that has already run autograd (its
            # worker threads started) cannot fork a child that runs it again
            start_method="spawn",
        )
        theirs = torch.load(out, weights_only=True)
    seconds = time.perf_counter() - start
    results = [
        Comparison(
            f"{world} processes of {batch // world} images vs one of {batch}, "
            f"weights after {steps} steps",
            dtype_label(d),
            _relative(theirs[str(name)], ours[str(name)]),
            rounding_tolerance(d),
        )
        for d, name in zip(dtypes, names)
    ]
    return DDPCheck(results, seconds)


# --- torch.compile --------------------------------------------------------------------


def train_step(model, optimizer, scaler, images, labels, device_type, dtype):
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = F.cross_entropy(model(images), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


class _GraphCasts:
    """A TorchDynamo backend that counts the dtype conversions in the forward and
    backward graphs AOTAutograd gives it, then runs them eagerly (as ``aot_eager``)."""

    CASTS = ("convert_element_type", "_to_copy")

    def __init__(self):
        self.casts = {"forward": 0, "backward": 0}

    def _count(self, which):
        def compiler(gm, example_inputs):
            self.casts[which] += sum(
                n.op == "call_function" and any(c in str(n.target) for c in self.CASTS)
                for n in gm.graph.nodes
            )
            from torch._functorch.aot_autograd import make_boxed_func

            return make_boxed_func(gm.forward)

        return compiler

    def backend(self):
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(
            fw_compiler=self._count("forward"), bw_compiler=self._count("backward")
        )


@dataclass
class CompileCheck:
    backend: str  # what ran: "inductor", "aot_eager" or "eager (...)"
    eager_casts: int  # casts autocast made in one eager forward
    graph_casts: dict  # casts in the compiled forward and backward graphs
    kernels: int | None  # kernels inductor generated (None: not inductor)
    graphs: int  # graphs torch._dynamo.explain found in the whole step
    graph_breaks: int
    break_reasons: list[str]
    eager_loss: float
    compiled_loss: float
    compile_s: float

    @property
    def ok(self) -> bool:
        same = abs(self.eager_loss - self.compiled_loss) <= 1e-2 * abs(self.eager_loss)
        return same and self.graph_casts["forward"] >= 1


def _reason(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= 80 else first[:77] + "..."


def break_reason(reason) -> str:
    """One graph break of ``torch._dynamo.explain``, in a line: the step's source line
    where it broke, the reason's first line and the function it names."""
    import re

    head = reason.reason.strip().splitlines()[0]
    named = re.search(r"`([^`]+)`", reason.reason)
    where = reason.user_stack[-1].line.strip() if reason.user_stack else "?"
    return f"{where}: {head}" + (f" ({named.group(1)})" if named else "")


def check_compile(
    backend: str = "aot_eager",  # or "inductor"
    dtype: torch.dtype = torch.bfloat16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
) -> CompileCheck:
    """The tiny model's step under autocast, eager and with ``torch.compile(model,
    backend=backend)``: the casts autocast makes eagerly (``CastCounter``) and those
    in the compiled graphs (counted by a backend around AOTAutograd, as
    ``aot_eager``), inductor's kernel count, the loss of each, and what
    ``torch._dynamo.explain`` finds in the whole step with a GradScaler (graphs and
    breaks). A compilation that fails runs eagerly, and ``backend`` says why."""
    import torch._dynamo

    from ampbook.measure.autocast_trace import CastCounter

    images, labels = tiny_batch(2, size, seed)
    model = tiny_model(seed)
    with CastCounter(model=model) as counter:
        with torch.autocast(device_type, dtype=dtype):
            model(images)
    eager = tiny_model(seed)
    eager_loss = train_step(
        eager,
        torch.optim.SGD(eager.parameters(), lr=0.1),
        scaler_for(device_type, dtype),
        images,
        labels,
        device_type,
        dtype,
    ).item()
    torch._dynamo.reset()
    counting = _GraphCasts()
    kernels = None
    start = time.perf_counter()
    used = backend
    try:
        counted = torch.compile(tiny_model(seed), backend=counting.backend())
        compiled_loss = train_step(  # the graphs run eagerly: aot_eager's loss
            counted,
            torch.optim.SGD(counted.parameters(), lr=0.1),
            scaler_for(device_type, dtype),
            images,
            labels,
            device_type,
            dtype,
        ).item()
        if backend == "inductor":
            from torch._inductor import metrics

            # its note that no CUDA runtime is found, on a machine without a GPU
            logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
            metrics.reset()
            fast = torch.compile(tiny_model(seed), backend=backend)
            compiled_loss = train_step(
                fast,
                torch.optim.SGD(fast.parameters(), lr=0.1),
                scaler_for(device_type, dtype),
                images,
                labels,
                device_type,
                dtype,
            ).item()
            kernels = metrics.generated_kernel_count
    except Exception as err:  # no compiler, an unsupported op: run eagerly, say why
        used = f"eager ({backend} failed: {_reason(str(err).splitlines()[0])})"
        compiled_loss = eager_loss
    compile_s = time.perf_counter() - start
    torch._dynamo.reset()
    m = tiny_model(seed)
    torch._logging.set_logs(dynamo=logging.ERROR)  # a warning about the profiler
    try:
        explained = torch._dynamo.explain(train_step)(
            m,
            torch.optim.SGD(m.parameters(), lr=0.1),
            torch.amp.GradScaler(device_type),
            images,
            labels,
            device_type,
            torch.float16,
        )
    finally:
        torch._logging.set_logs()  # torch's default levels again
        torch._dynamo.reset()
    return CompileCheck(
        used,
        len(counter.casts),
        counting.casts,
        kernels,
        explained.graph_count,
        explained.graph_break_count,
        [break_reason(r) for r in explained.break_reasons],
        eager_loss,
        compiled_loss,
        compile_s,
    )


def compile_reading(c: CompileCheck) -> str:
    """What ``check_compile`` shows of the casts, in words true of the backend that
    ran: the casts in the compiled forward graph against the eager forward's, and
    whether inductor compiled them into kernels."""
    kept = (
        "every cast autocast makes"
        if c.graph_casts["forward"] == c.eager_casts
        else f"{c.graph_casts['forward']} of the eager forward's {c.eager_casts} casts"
    )
    head = (
        f"Compilation kept {kept} in its forward graph "
        f"({c.graph_casts['forward']} casts, {c.graph_casts['backward']} in the "
        "backward graph)"
    )
    if c.kernels is not None:
        return (
            f"{head}, and inductor compiled the graphs, casts included, into "
            f"{c.kernels} kernels (measured here)."
        )
    return (
        f"{head}; the backend that ran, {c.backend}, runs the graphs' operators one "
        "by one, casts included, so nothing was fused here (inductor, which needs a "
        "C++ compiler, compiles the graphs into kernels of its own)."
    )


def ladder_compile_rows(ladders) -> list[tuple]:
    """Rung 5 (``torch.compile``) beside rung 4 of each committed GPU ladder: (GPU,
    precision, rung-4 step s, rung-5 step s, rung 4 / rung 5)."""
    from ampbook.core.devices import display_name

    rows = []
    for ladder in ladders:
        for mode in ladder.modes():
            eager, fast = ladder.cell(4, mode), ladder.cell(5, mode)
            if eager and fast and eager.ok and fast.ok:
                rows.append(
                    (
                        display_name(ladder.device_name),
                        fast.mode_label,
                        eager.step_s,
                        fast.step_s,
                        eager.step_s / fast.step_s,
                    )
                )
    return rows


# --- activation checkpointing against AMP ---------------------------------------------


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in the backward pass."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def checkpoint_blocks(model):
    """Wrap every block of ERFNet's encoder and decoder in ``Checkpointed``."""
    for part in (model.encoder, model.decoder):
        for i, block in enumerate(part.layers):
            part.layers[i] = Checkpointed(block)
    return model


@dataclass
class MemoryRow:
    setting: str
    peak_bytes: int  # tensors alive at once over forward + backward
    step_s: float


def memory_rows(
    height: int = 32,
    width: int = 64,
    batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 1,
    seed: int = 0,
) -> list[MemoryRow]:
    """ERFNet's training step (forward, loss, backward) in fp32, under autocast in
    ``dtype``, with ``checkpoint_blocks``, and with both: peak bytes allocated
    (``AllocatedBytesMeter``, one step) and the median step time (``repeats`` timed
    steps after a warm-up, without the meter)."""
    from ampbook.measure.timing import benchmark
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, height, width, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (batch, height, width))
    rows = []
    for name, d, ckpt in (
        ("fp32", None, False),
        (f"AMP ({torch_name(dtype)})", dtype, False),
        ("checkpointing", None, True),
        ("both", dtype, True),
    ):
        torch.manual_seed(seed)
        model = ERFNet(NUM_CLASSES)
        if ckpt:
            checkpoint_blocks(model)

        def step():
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=d or torch.float32, enabled=d is not None):
                loss = F.cross_entropy(model(images), labels)
            loss.backward()

        step()  # a warm-up, which also makes the gradients
        with AllocatedBytesMeter() as meter:
            model.zero_grad(set_to_none=False)  # the gradients exist: not counted
            with torch.autocast("cpu", dtype=d or torch.float32, enabled=d is not None):
                loss = F.cross_entropy(model(images), labels)
            loss.backward()
        seconds = benchmark(
            step, warmup=0, repeats=repeats, number=1, min_time=0.0
        ).median_s
        rows.append(MemoryRow(name, meter.peak_bytes, seconds))
    return rows


def block_input_dtypes(
    height: int = 32,
    width: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    fp16_stream: bool = False,
    seed: int = 0,
) -> dict[str, dict[str, int]]:
    """The dtypes of the inputs ``checkpoint_blocks`` would store: per part of ERFNet
    (``encoder``, ``decoder``), how many of its blocks received each dtype in one
    forward under CPU autocast in ``dtype`` (``fp16_stream``: ERFNet's option)."""
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(seed)
    model = ERFNet(NUM_CLASSES, fp16_stream=fp16_stream)
    seen: dict[str, dict[str, int]] = {"encoder": {}, "decoder": {}}

    def record(part):
        def hook(_module, args):
            name = torch_name(args[0].dtype)
            seen[part][name] = seen[part].get(name, 0) + 1

        return hook

    hooks = [
        block.register_forward_pre_hook(record(part))
        for part in seen
        for block in getattr(model, part).layers
    ]
    g = torch.Generator().manual_seed(seed)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            model(torch.randn(1, 3, height, width, generator=g))
    finally:
        for h in hooks:
            h.remove()
    return seen


def stored_inputs_text(seen: dict[str, dict[str, int]]) -> str:
    """``block_input_dtypes`` in words: "encoder 16 float32; decoder ..."."""
    return "; ".join(
        f"{part} " + ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
        for part, counts in seen.items()
    )


def stored_inputs_verdict(plain: dict, stream: dict, dtype_label: str) -> str:
    """Chapter 8's sentence on what checkpointing stores: ``block_input_dtypes`` of
    ERFNet as it is and with its ``fp16_stream`` option on, under autocast to
    ``dtype_label``."""
    return (
        f"The block inputs checkpointing stores under autocast ({dtype_label}), "
        f"counted by dtype per part (measured here): {stored_inputs_text(plain)}; "
        f"with ERFNet's `fp16_stream` option on: {stored_inputs_text(stream)}."
    )


# --- fp16 or bf16 ---------------------------------------------------------------------


def flushed_fractions(grads: list[torch.Tensor]) -> dict[str, float]:
    """The share of the nonzero gradients that round to zero in fp16 and in bf16
    (``ampbook.numerics.formats.round_to``), unscaled."""
    from ampbook.numerics.formats import round_to

    g = torch.cat([x.detach().flatten().float() for x in grads])
    g = g[g != 0]
    return {
        name: float((round_to(g, name) == 0).float().mean())
        for name in ("fp16", "bf16")
    }


def _ratio_pace(ratios) -> str:
    """``ampbook.chapters.findings.pace`` of bf16 / fp16 step ratios (above 1: fp16
    faster) in words about fp16, or "not judged" with fewer than two ratios."""
    from ampbook.chapters.ch3 import pace

    if len(ratios) < 2:
        return "not judged: one timed step each, no spread"
    verdict = pace(ratios)
    return {"faster": "fp16 faster", "slower": "bf16 faster"}.get(verdict, verdict)


def gpu_step_ratios(gpu: dict) -> list[float]:
    """bf16 / fp16 step time epoch by epoch of ``gpu_16bit_runs``' two runs (the
    timed epochs they share)."""
    pairs = zip(gpu["amp-bf16"].timed_epochs(), gpu["amp-fp16"].timed_epochs())
    return [b["step_s"] / f["step_s"] for b, f in pairs]


def choice_verdict(gpu: dict, here: dict[str, tuple[float, ...]]) -> str:
    """The reading of the fp16/bf16 table and the decision it gives: the bf16 / fp16
    step ratio on the committed GPU (``gpu``: ``gpu_16bit_runs``, empty when none)
    with its per-epoch range, and on this machine (``here``: the timed steps' seconds
    per ``amp-fp16``/``amp-bf16``) with the range over its timed steps, each judged by
    ``ampbook.chapters.findings.pace``: fp16 only where it was faster in every epoch
    (every pair of timed steps), else bf16."""
    from ampbook.core.devices import display_name

    def reading(ratio: float, ratios: list[float], spread: str) -> tuple[str, bool]:
        judged = _ratio_pace(ratios)
        rng = (
            f", {spread} {min(ratios):.3f}-{max(ratios):.3f}" if len(ratios) > 1 else ""
        )
        return f"bf16 / fp16 {ratio:.2f}{rng}: {judged}", judged == "fp16 faster"

    parts = []
    if gpu:
        name = display_name(gpu["amp-fp16"].device_name)
        ratios = gpu_step_ratios(gpu)
        text, fp16 = reading(
            gpu["amp-bf16"].step_s / gpu["amp-fp16"].step_s, ratios, "per epoch"
        )
        pick = "fp16 with a GradScaler" if fp16 else "bf16"
        parts.append(
            f"on the {name}, {text} (measured, committed chapter 3 runs), so the rule "
            f"below picks {pick} there"
        )
    else:
        parts.append("no committed GPU run to compare")
    f, b = here["amp-fp16"], here["amp-bf16"]
    ends = [min(b) / max(f), max(b) / min(f)] if min(len(f), len(b)) > 1 else []
    text, _ = reading(median(b) / median(f), ends, "over the timed steps")
    parts.append(f"on this machine, {text} (measured now)")
    return (
        "Step time: " + "; ".join(parts) + ". The rule: fp16 only where its step was "
        "faster in every epoch (every timed step); inside the spread, bf16, which "
        "needs no GradScaler and skips no steps."
    )


def step_times(model, images, labels, dtype, repeats: int = 1) -> tuple[float, ...]:
    """Seconds of each of ``repeats`` timed forward and backward passes of ``model``
    under CPU autocast in ``dtype`` (no optimizer), after one warm-up."""
    from ampbook.measure.timing import benchmark

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(images), labels, ignore_index=255)
        loss.backward()

    return benchmark(step, warmup=1, repeats=repeats, number=1, min_time=0.0).times_s


def memory_verdict(rows: list[MemoryRow]) -> str:
    """Which of ``memory_rows``' settings needed the least memory and what each cost
    in time, against fp32."""
    base = rows[0]
    least = min(rows, key=lambda r: r.peak_bytes)
    parts = [
        f"{r.setting} {r.peak_bytes / base.peak_bytes:.2f}x the memory and "
        f"{r.step_s / base.step_s:.2f}x the time"
        for r in rows[1:]
    ]
    return (
        f"Against fp32 (measured on this machine): {'; '.join(parts)}. "
        f"The least memory: {least.setting}."
    )


def gpu_16bit_runs(found) -> dict:
    """The committed chapter 3 GPU runs of one GPU and setting that have both
    ``amp-fp16`` and ``amp-bf16`` (``{mode: TrainRun}``), or ``{}``."""
    by_setting: dict = {}
    for r in found.gpu_runs():
        by_setting.setdefault((r.device_name, r.setting), {})[r.mode] = r
    for runs in by_setting.values():
        if {"amp-fp16", "amp-bf16"} <= set(runs):
            return {m: runs[m] for m in ("amp-fp16", "amp-bf16")}
    return {}


def choice_rows(
    flushed: dict, skipped_here: int, steps_here: int, gpu: dict, here: dict
) -> list[tuple]:
    """The fp16-or-bf16 table: (what, fp16, bf16, kind and source) per line.
    ``flushed``: ``flushed_fractions`` of this machine's gradients; ``skipped_here``
    of ``steps_here`` GradScaler steps; ``gpu``: ``gpu_16bit_runs``; ``here``: the
    timed steps' seconds per ``amp-fp16``/``amp-bf16`` on this machine."""
    f16, b16 = get_format("fp16"), get_format("bf16")
    ch1 = "computed: ampbook.numerics.formats (chapter 1)"
    rows = [
        ("largest finite value", f"{f16.max:.4g}", f"{b16.max:.3g}", ch1),
        (
            "smallest normal",
            f"{f16.smallest_normal:.3g}",
            f"{b16.smallest_normal:.3g}",
            ch1,
        ),
        ("unit roundoff", f"{f16.unit_roundoff:.3g}", f"{b16.unit_roundoff:.3g}", ch1),
        (
            "gradients flushed to 0, unscaled",
            f"{flushed['fp16']:.2%}",
            f"{flushed['bf16']:.2%}",
            "measured here: ERFNet, one fp32 backward (ch. 4)",
        ),
        (
            f"steps skipped, {steps_here} steps",
            str(skipped_here),
            "0 (no scaler)",
            "measured here: GradScaler, ERFNet (chapter 4)",
        ),
    ]
    if gpu:
        from ampbook.core.devices import display_name

        f, b = gpu["amp-fp16"], gpu["amp-bf16"]
        src = f"measured: committed {display_name(f.device_name)} runs (chapter 3)"
        rows += [
            (
                "GPU skipped steps, whole run",
                str(f.skipped_steps),
                f"{b.skipped_steps} (no scaler)",
                src,
            ),
            (
                "GPU step (ms)",
                f"{f.one_step_s * 1e3:.1f}",
                f"{b.one_step_s * 1e3:.1f}",
                src,
            ),
            (
                "GPU final val pixel accuracy",
                f"{f.final_val_pixel_accuracy:.3f}",
                f"{b.final_val_pixel_accuracy:.3f}",
                src,
            ),
        ]
    rows.append(
        (
            "this machine's step (ms)",
            f"{median(here['amp-fp16']) * 1e3:.1f}",
            f"{median(here['amp-bf16']) * 1e3:.1f}",
            "measured here: ERFNet forward+backward, median",
        )
    )
    return rows
