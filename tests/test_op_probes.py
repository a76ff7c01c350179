"""ampbook.chapters.ch4.op_probes: each op's output dtypes under autocast, on CPU and
CUDA (fake CUDA tensors without a GPU), and under CUDA's rules in a CPU region."""

import pytest
import torch

from ampbook.chapters.ch4 import op_probes


def test_classify_names_the_behaviour():
    bf, f32 = torch.bfloat16, torch.float32
    assert op_probes.classify(bf, bf, bf) == "lower_precision"
    assert op_probes.classify(f32, f32, bf) == "float32"
    assert op_probes.classify(f32, bf, bf) == "input dtype"
    assert op_probes.classify(f32, bf, bf, out_mixed=f32) == "promote"


def test_cpu_probes_match_the_cpu_lists():
    rows = {
        r.op: r
        for r in op_probes.probe_ops(
            "cpu",
            names=("conv2d", "relu", "cat", "cross_entropy", "softmax", "batch_norm"),
        )
    }
    assert (
        rows["conv2d"].observed == "lower_precision"
        and rows["conv2d"].out_from_fp32 == "bfloat16"
    )
    assert rows["relu"].observed == "input dtype"
    assert rows["cat"].observed == "promote" and rows["cat"].documented == "promote"
    assert rows["cross_entropy"].observed == "float32"
    # on CPU softmax is not forced to fp32: it runs in its input's dtype
    assert (
        rows["softmax"].observed == "input dtype" and rows["softmax"].documented is None
    )
    assert rows["batch_norm"].out_from_low == "bfloat16"
    assert op_probes.disagreements(list(rows.values())) == []


def test_cuda_probes_run_real_or_fake():
    rows = {
        r.op: r
        for r in op_probes.probe_ops("cuda", names=("conv2d", "softmax", "sum", "relu"))
    }
    assert rows["conv2d"].out_from_fp32 == "float16"
    assert rows["softmax"].observed == "float32" and rows["sum"].observed == "float32"
    assert rows["relu"].observed == "input dtype"
    assert rows["conv2d"].device == (
        "cuda (fake)" if not torch.cuda.is_available() else "cuda"
    )


def test_probe_rejects_bad_arguments():
    with pytest.raises(ValueError, match="no probe named"):
        op_probes.probe_ops("cpu", names=("not_an_op",))
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        op_probes.probe_ops("cpu", dtype=torch.float64)


def test_cuda_rules_give_cpu_probes_cudas_dtypes():
    # every probe, run under CPU autocast with CUDA's lists applied, gives the dtypes
    # CUDA autocast gives (on fake CUDA tensors without a GPU); without them, layer
    # norm, softmax, sums, upsampling... differ
    cuda = {r.op: r for r in op_probes.probe_ops("cuda", dtype=torch.float16)}
    ruled = op_probes.probe_ops("cpu", dtype=torch.float16, cuda_rules=True)
    plain = {r.op: r for r in op_probes.probe_ops("cpu", dtype=torch.float16)}

    def dtypes(r):
        return (r.out_from_fp32, r.out_from_low, r.out_mixed, r.observed)

    assert ruled[0].device == "cpu (CUDA rules)"
    assert [dtypes(r) for r in ruled] == [dtypes(cuda[r.op]) for r in ruled]
    differ = {op for op in plain if dtypes(plain[op]) != dtypes(cuda[op])}
    assert {"layer_norm", "softmax", "sum", "upsample_bilinear2d"} <= differ
    with pytest.raises(ValueError, match="cuda_rules"):
        op_probes.probe_ops("cuda", cuda_rules=True)
