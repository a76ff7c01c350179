"""``torch.compile`` with autocast (chapter 8): ``check_compile`` counts the casts
eagerly and in the compiled graphs, compares the losses, and asks
``torch._dynamo.explain`` where the step with a GradScaler breaks."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.tiny import scaler_for, sgd_update, tiny_batch, tiny_model


def train_step(model, optimizer, scaler, images, labels, device_type, dtype):
    """Shown on the page in chapter 8 (08_amp_patterns)."""
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = F.cross_entropy(model(images), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


class _GraphCasts:
    """A Dynamo backend: counts the casts in AOTAutograd's graphs, runs them eagerly."""

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
    break_reasons: list[str]  # every break dynamo counted (all_break_reasons)
    eager_loss: float
    compiled_loss: float
    compile_s: float
    plain_graphs: int = 0  # the same step without a GradScaler
    plain_graph_breaks: int = 0
    plain_break_reasons: list[str] | None = None
    op_graphs: int = 0  # of ``graphs``, those holding an operator (the rest empty)
    plain_op_graphs: int = 0

    def scaler_breaks(self) -> list[str]:
        """The break reasons of the step with a GradScaler that without has not."""

        def reason(line: str) -> str:  # without its " xN" count
            return line.rsplit(" x", 1)[0] if line[-1].isdigit() else line

        plain = {reason(r) for r in self.plain_break_reasons or []}
        return [r for r in self.break_reasons if reason(r) not in plain]

    @property
    def ok(self) -> bool:
        same = abs(self.eager_loss - self.compiled_loss) <= 1e-2 * abs(self.eager_loss)
        return same and self.graph_casts["forward"] >= 1


def check_compile(
    backend: str = "aot_eager",  # or "inductor"
    dtype: torch.dtype = torch.bfloat16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
) -> CompileCheck:
    """The tiny model's step eager and compiled: casts, losses, inductor's kernels and
    the graph breaks; a compilation that fails runs eagerly and ``backend`` says why."""
    import torch._dynamo

    from ampbook.measure.model_dtypes import CastCounter

    images, labels = tiny_batch(2, size, seed)
    model = tiny_model(seed)
    with CastCounter(model=model) as counter:
        with torch.amp.autocast(device_type, dtype=dtype):
            model(images)

    def loss_of(net) -> float:
        args = (scaler_for(device_type, dtype), images, labels, device_type, dtype)
        return sgd_update(train_step, net, *args)[0].item()

    eager_loss = loss_of(tiny_model(seed))
    torch._dynamo.reset()
    counting = _GraphCasts()
    kernels = None
    start = time.perf_counter()
    used = backend
    try:  # the counted graphs run eagerly: aot_eager's loss
        compiled_loss = loss_of(
            torch.compile(tiny_model(seed), backend=counting.backend())
        )
        if backend == "inductor":
            from torch._inductor import metrics

            # its note that no CUDA runtime is found, on a machine without a GPU
            logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
            metrics.reset()
            compiled_loss = loss_of(torch.compile(tiny_model(seed), backend=backend))
            kernels = metrics.generated_kernel_count
    except Exception as err:  # no compiler, an unsupported op: run eagerly, say why
        why = " ".join(str(err).splitlines()[0].split())
        why = why if len(why) <= 80 else why[:77] + "..."
        used = f"eager ({backend} failed: {why})"
        compiled_loss = eager_loss
    compile_s = time.perf_counter() - start
    torch._dynamo.reset()
    explained = {
        s: explain_step(s, images, labels, device_type, seed)
        for s in (train_step, train_step_without_scaler)
    }
    return CompileCheck(
        used,
        len(counter.casts),
        counting.casts,
        kernels,
        *explained[train_step][:3],
        eager_loss,
        compiled_loss,
        compile_s,
        *explained[train_step_without_scaler][:3],
        op_graphs=explained[train_step][3],
        plain_op_graphs=explained[train_step_without_scaler][3],
    )


def train_step_without_scaler(
    model, optimizer, scaler, images, labels, device_type, dtype
):
    """``train_step`` without the GradScaler (``scaler`` unused)."""
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def all_break_reasons(counted) -> list[str]:
    """Each graph break on one line: its reason, the function it names, how often."""
    import re

    lines = []
    for text, n in counted.items():
        head = text.strip().splitlines()[0]
        named = re.search(r"`([^`]+)`", text)
        name = named.group(1) if named else ""
        apart = name and name not in head  # not named in the first line already
        lines.append(
            head + (f" ({name})" if apart else "") + (f" x{n}" if n > 1 else "")
        )
    return lines


def explain_step(step, images, labels, device_type: str = "cpu", seed: int = 0):
    """``torch._dynamo.explain`` of ``step``: graphs, breaks, reasons, graphs with an
    operator (the optimizer's step breaks the graph: torch/optim/optimizer.py)."""
    from torch._dynamo.utils import counters

    m = tiny_model(seed)
    torch._logging.set_logs(dynamo=logging.ERROR)  # a warning about the profiler
    counters.clear()
    try:
        explained = torch._dynamo.explain(step)(
            m,
            torch.optim.SGD(m.parameters(), lr=0.1),
            torch.amp.GradScaler(device_type),
            images,
            labels,
            device_type,
            torch.float16,
        )
        counted = all_break_reasons(counters["graph_break"])
    finally:
        torch._logging.set_logs()  # torch's default levels again
        torch._dynamo.reset()
    with_ops = sum(
        any(n.op == "call_function" for n in g.graph.nodes) for g in explained.graphs
    )
    return explained.graph_count, explained.graph_break_count, counted, with_ops
