"""Chapter 9 (When AMP goes wrong): each section's check passes with its fix and
fails with the fix removed (the failure planted)."""

from __future__ import annotations

import pytest
import torch

from ampbook.chapters.ch9 import compile_autocast as compiled
from ampbook.chapters.ch9 import fp8, overflow, ranks, scheduler, tf32
from ampbook.chapters.ch9 import recompute as checkpointing
from ampbook.chapters.ch9 import weight_copies as ch9_memory
from ampbook.core import params
from ampbook.core.devices import load_devices
from ampbook.core.env import tf32_state


def test_overflow_found_and_fixed():
    c = overflow.check_fix(overflow.keep_in_fp32)
    assert c.first_bad == "block2.down" and c.largest > overflow.FP16_MAX
    assert c.ok, c.verdict()


def test_overflow_check_fails_without_the_fix_or_on_the_wrong_block():
    assert not overflow.check_fix(lambda m, name: m).ok
    assert not overflow.check_fix(lambda m, name: overflow.keep_in_fp32(m, "block1")).ok


def test_first_nonfinite_follows_the_planted_block():
    model = overflow.pretrained(block="block1")
    assert overflow.first_nonfinite(model, overflow.batch()).startswith("block1")
    assert (
        overflow.first_nonfinite(overflow.pretrained(gain=1.0), overflow.batch())
        is None
    )


def test_scheduler_follows_the_optimizer_only_with_the_fix():
    fixed = scheduler.check_scheduler(scheduler.step_when_stepped)
    assert fixed.ok and fixed.skipped == 1 and fixed.optimizer_steps == 3
    planted = scheduler.check_scheduler(scheduler.step_always)
    assert not planted.ok and planted.warned and planted.scheduler_steps == 4


def test_several_optimizers_on_one_scaler_need_their_own_step_counts():
    fixed = scheduler.check_shared_schedulers("count")
    assert fixed.ok and fixed.optimizer_steps == (3, 2), fixed.verdict()
    # the one-optimizer fix (the scale fell) holds back the optimizer that stepped
    planted = scheduler.check_shared_schedulers("scale")
    assert not planted.ok and planted.scheduler_steps == (2, 2), planted.verdict()


def test_tf32_reader_survives_the_mixed_state_and_the_legacy_one_does_not():
    before = tf32_state()
    check = tf32.check_tf32()
    assert check.ok and check.legacy_error, check.verdict()
    assert not tf32.check_tf32(reader=tf32.legacy_read).ok
    assert tf32_state() == before  # every switch restored


def test_fp8_predicted_slower_small_and_faster_large():
    h100 = load_devices()["h100-sxm"]
    assert fp8.predict_linear(h100, 256, 8192).speedup < 1
    assert fp8.predict_linear(h100, 8192, 8192).speedup > 1
    w = fp8.crossover(h100, 8192)
    assert w is not None and fp8.predict_linear(h100, w // 2, 8192).speedup <= 1
    # a GPU with no fp8 cores cannot be predicted: the table says so
    assert load_devices()["a100-sxm-80gb"].fp8_tflops is None
    assert torch.finfo(torch.float16).max == overflow.FP16_MAX


def test_the_fp8_gpu_parameter_takes_any_name_of_a_gpu_and_refuses_a_typo():
    """``-p fp8_gpu h200`` (or "H100 SXM", "NVIDIA H200", a key) reaches the table's
    key through params.gpu; a typo stops the run naming the parameter and the nearest
    GPU, where ``load_devices()[fp8_gpu]`` gave a bare KeyError."""
    from ampbook.core.paths import REPO_ROOT

    names = {
        "h100-sxm": "h100-sxm",
        "h200": "h200-sxm",
        "H100 SXM": "h100-sxm",
        "NVIDIA H200": "h200-sxm",
    }
    for given, key in names.items():
        assert params.gpu("fp8_gpu", given) == key
    with pytest.raises(params.ParameterError) as err:
        params.gpu("fp8_gpu", "h2000")
    assert str(err.value) == (
        "parameter fp8_gpu = 'h2000': unknown GPU 'h2000'; did you mean h200-sxm? "
        "(a key, a short name or an alias)"
    )
    with pytest.raises(params.ParameterError, match="fp8_gpu = 'rtx30': ambiguous"):
        params.gpu("fp8_gpu", "rtx30")
    from ampbook.chapters.ch9.fp8 import fp8_gpu_key

    assert fp8_gpu_key("fp8_gpu", "H200") == "h200-sxm"
    with pytest.raises(params.ParameterError) as err:  # an A100 has no fp8 cores
        fp8_gpu_key("fp8_gpu", "a100")
    assert str(err.value).startswith(
        "parameter fp8_gpu = 'a100': the A100 SXM 80GB has no fp8 tensor cores; the "
        "table's GPUs with them: H100 SXM, H200 SXM,"
    )
    text = (REPO_ROOT / "notebooks" / "09_when_amp_goes_wrong.py").read_text()
    assert 'fp8_key = fp8_gpu_key("fp8_gpu", fp8_gpu)' in text  # the check cell's


def test_amp_step_costs_memory_below_the_crossover_and_saves_above():
    below = ch9_memory.check_memory(8)
    assert below.amp_costs and not below.ok and below.as_predicted, below.verdict()
    c = below.crossover_tokens
    # the prediction holds just either side of it: half and twice the crossover
    half = ch9_memory.check_memory(round(c / 2), crossover=c)
    assert half.amp_costs and half.as_predicted, half.verdict()
    twice = ch9_memory.check_memory(round(2 * c), crossover=c)
    assert twice.ok and twice.as_predicted, twice.verdict()
    # a prediction off by 4x fails there (planted): too high, then too low
    assert not ch9_memory.check_memory(round(2 * c), crossover=4 * c).as_predicted
    assert not ch9_memory.check_memory(round(c / 2), crossover=c / 4).as_predicted
    # what autocast adds at 8 tokens, the 16-bit weight copies saved for backward,
    # outweighs every byte fp32 saves
    model = ch9_memory.wide_model()
    amp = ch9_memory.step_bytes(model, 8, torch.float16)
    assert amp["by_dtype"]["float16"] > ch9_memory.step_bytes(model, 8)["saved"]


def test_checkpoint_recomputes_in_the_forwards_dtypes_only_with_the_fix():
    fixed = checkpointing.check_checkpoint(checkpointing.forward_state)
    assert fixed.ok and fixed.recomputed_dtypes[0] == "float16", fixed.verdict()
    planted = checkpointing.check_checkpoint(checkpointing.autocast_off)
    assert not planted.ok and planted.error and "metadata" in planted.error
    assert planted.recomputed_dtypes[0] == "float32"


def test_compiled_backward_matches_eager_only_with_backward_autocast_off():
    fixed = compiled.check_backward("off")
    assert fixed.ok and fixed.eager_largest > overflow.FP16_MAX, fixed.verdict()
    planted = compiled.check_backward("same_as_forward")
    assert not planted.ok and not planted.compiled_finite, planted.verdict()


def test_compiled_block_recompiles_only_when_called_outside_the_autocast_state():
    fixed = compiled.check_recompiles(compiled.second_call_inside)
    assert fixed.ok and fixed.graphs == 1, fixed.verdict()
    planted = compiled.check_recompiles(compiled.second_call_outside)
    # one extra graph for the second autocast state, not one per step
    assert not planted.ok and planted.graphs == 2 < planted.rounds
    assert any("autocast" in r for r in planted.reasons), planted.reasons


def test_ranks_stay_one_model_only_with_one_scaler_state():
    fixed = ranks.check_ranks(ranks.same_scaler_state)
    assert fixed.ok and fixed.skipped == (1, 1), fixed.verdict()
    assert fixed.scales[-1][0] == fixed.scales[-1][1]
    planted = ranks.check_ranks(ranks.keep_own_state)
    assert not planted.ok and planted.drift > 0, planted.verdict()
    # the skip decisions agree even then: both ranks unscale the same mean
    assert planted.skipped == (1, 1)
    # equal scales need no fix
    same = ranks.check_ranks(ranks.keep_own_state, scales=(2.0**10, 2.0**10))
    assert same.ok, same.verdict()
