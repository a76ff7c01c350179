"""ampbook.measure.tracking.ModuleScopes: the innermost module of a model, forward (on
ModuleTracker) and backward (on the autograd nodes each module created)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ampbook.measure.tracking import ModuleScopes


class Block(nn.Module):
    """A residual block with a downsample branch that reads the block's input too,
    and a dropout that returns its input (p=0)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.drop = nn.Dropout(0.0)
        self.down = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return F.relu(self.drop(self.conv(x)) + self.down(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.block = Block()
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(self.block(self.stem(x) * 2))


class Scoped(TorchDispatchMode):
    """Records (phase, op, scope) of every ATen operator."""

    def __init__(self, scopes: ModuleScopes):
        super().__init__()
        self.scopes, self.rows, self.phase = scopes, [], "forward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        scope = (
            self.scopes.innermost()
            if self.phase == "forward"
            else self.scopes.backward_scope()
        )
        self.rows.append((self.phase, func.overloadpacket.__name__, scope))
        return func(*args, **(kwargs or {}))


def _run(model, x, wrap=None):
    with ModuleScopes(model, backward=True) as scopes, Scoped(scopes) as rec:
        out = (wrap or model)(x)
        loss = out.sum()
        scopes.claim(loss, ("(loss)", "loss"))
        rec.phase = "backward"
        loss.backward()
    return rec.rows


def _ops(rows, phase, op):
    return [scope for p, o, scope in rows if p == phase and o == op]


def test_forward_ops_go_to_the_innermost_module_by_its_qualified_name():
    rows = _run(Net(), torch.randn(1, 3, 8, 8))
    names = [scope[0] for scope in _ops(rows, "forward", "convolution")]
    assert names == ["stem", "block.conv", "block.down", "head"]
    assert _ops(rows, "forward", "mul") == [("Net", "Net")]  # the root's own op
    assert ("block", "Block") in _ops(rows, "forward", "relu")
    assert _ops(rows, "forward", "sum") == [None]  # outside the model


def test_backward_ops_go_to_the_module_that_created_their_node():
    rows = _run(Net(), torch.randn(1, 3, 8, 8))
    names = [scope[0] for scope in _ops(rows, "backward", "convolution_backward")]
    assert sorted(names) == ["block.conv", "block.down", "head", "stem"]
    assert _ops(rows, "backward", "threshold_backward") == [("block", "Block")]
    assert _ops(rows, "backward", "mul") == [("Net", "Net")]
    # the loss's own gradient, handed to a scope by claim()
    assert ("(loss)", "loss") in _ops(rows, "backward", "expand")


def test_module_tracker_alone_names_the_wrong_module_in_backward():
    # why ModuleScopes does not use ModuleTracker's backward ``parents``: Dropout(p=0)
    # returns its input, enters and leaves on one gradient, and stays "running"
    from torch.utils.module_tracker import ModuleTracker

    model = Net()
    seen = []

    class Deepest(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "convolution_backward":
                seen.append(max(tracker.parents, key=lambda p: p.count(".")))
            return func(*args, **(kwargs or {}))

    with ModuleTracker() as tracker:
        out = model(torch.randn(1, 3, 8, 8))
        with Deepest():
            out.sum().backward()
    assert "Net.block.drop" in seen


def test_names_hold_when_the_model_runs_inside_another_module():
    model = Net()
    wrapper = nn.Sequential(nn.Identity(), model)
    rows = _run(model, torch.randn(1, 3, 8, 8), wrap=wrapper)
    assert [s[0] for s in _ops(rows, "forward", "convolution")] == [
        "stem",
        "block.conv",
        "block.down",
        "head",
    ]


def test_hooks_are_removed_and_nothing_runs_outside():
    model = Net()
    _run(model, torch.randn(1, 3, 8, 8))
    assert not model._forward_pre_hooks and not model._forward_hooks
    with ModuleScopes(model) as scopes:
        assert scopes.innermost() is None and scopes.backward_scope() is None
    from torch.nn.modules import module

    assert not module._global_forward_pre_hooks and not module._global_forward_hooks
