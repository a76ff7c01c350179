"""Chapter 8's patterns (ampbook.chapters.ch8): each check passes for the loop the
chapter shows and fails for the same loop written wrong; and what chapter 8 reads of
them (ampbook.chapters.ch8)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ampbook.chapters import ch8
from ampbook.chapters.ch8 import (
    accumulation,
    checkpointing,
    compiled,
    custom_function,
    ddp,
    fp16_or_bf16,
    fsdp,
    inference,
    penalty,
    shared_scaler,
    tiny,
)
from ampbook.measure.memory import AllocatedBytesMeter
from ampbook.results import load_results_dir

FIXTURES = Path(__file__).parent / "fixtures" / "results"


def accumulate_without_dividing(
    model, optimizer, scaler, micro_batches, device_type, dtype
):
    optimizer.zero_grad()
    for images, labels in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels)  # not divided
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def test_accumulation_matches_one_large_batch_in_fp32_and_amp():
    for dtype in (None, torch.float16, torch.bfloat16):
        c = accumulation.check_accumulation(dtype=dtype, micro=2, size=8)
        assert c.ok, c.verdict()
        assert 0 <= c.difference <= c.tolerance


def test_accumulation_check_fails_without_division_and_with_batch_norm():
    wrong = accumulation.check_accumulation(
        accumulate_without_dividing, micro=2, size=8
    )
    assert not wrong.ok and wrong.difference > 0.5, wrong.verdict()  # twice the update
    assert "outside" in wrong.verdict()
    bn = accumulation.check_accumulation(micro=2, size=8, batch_norm=True)
    assert not bn.ok and "batch norm" in bn.verdict()


def test_clipping_with_accumulation_unscales_after_the_last_micro_batch():
    right = accumulation.check_clipped_accumulation(micro=2, size=8)
    assert right.ok, right.verdict()
    model, (images, labels) = tiny.tiny_model(0), tiny.tiny_batch(4, 8, 0)
    F.cross_entropy(model(images), labels).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert norm > accumulation.CLIP  # the clipping acts
    wrong = accumulation.check_clipped_accumulation(
        accumulation.unscale_after_first_micro_batch, micro=2, size=8
    )
    assert not wrong.ok and wrong.difference > 0.05, wrong.verdict()


def update_after_each_step(
    models,
    optimizers,
    scaler,
    images,
    labels,
    device_type,
    dtype,
    losses=shared_scaler.coupled_losses,
):
    for optimizer in optimizers:
        optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        out0, out1 = models[0](images), models[1](images)
        loss0, loss1 = losses(out0, out1, labels)
    scaler.scale(loss0).backward(retain_graph=True)
    scaler.scale(loss1).backward()
    for optimizer in optimizers:
        scaler.step(optimizer)
        scaler.update()  # wrong: one update per optimizer


def test_shared_scaler_skips_together_when_coupled_alone_when_not():
    coupled = shared_scaler.check_shared_scaler()
    assert coupled.ok and coupled.skipped == (True, True), coupled.verdict()
    assert coupled.scale_after == coupled.scale_before / 2
    separate = shared_scaler.check_shared_scaler(losses=shared_scaler.separate_losses)
    assert separate.ok and separate.skipped == (False, True), separate.verdict()


def test_shared_scaler_check_fails_with_an_update_per_optimizer():
    wrong = shared_scaler.check_shared_scaler(update_after_each_step)
    assert not wrong.ok, wrong.verdict()
    assert wrong.scale_after == wrong.scale_before / 4  # two optimizers found an inf
    assert "not as it should" in wrong.verdict()
    # once per optimizer that found an inf: with separate losses only one did
    one = shared_scaler.check_shared_scaler(
        update_after_each_step, losses=shared_scaler.separate_losses
    )
    assert one.scale_after == one.scale_before / 2 and one.skipped == (False, True)


def test_shared_scaler_both_step_unplanted_and_default_scale_overflows_alone():
    for losses in (shared_scaler.coupled_losses, shared_scaler.separate_losses):
        calm = shared_scaler.check_shared_scaler(losses=losses, plant=False)
        assert calm.ok and calm.skipped == (False, False), calm.verdict()
        assert calm.scale_after == calm.scale_before
    # at GradScaler's default 2**16 the coupled losses overflow with nothing planted:
    # a check starting there would credit the plant with a halving it did not cause
    loud = shared_scaler.check_shared_scaler(plant=False, init_scale=2.0**16)
    assert not loud.ok and loud.skipped != (False, False), loud.verdict()
    # the page's reading: an overflow inside the backward (loss1 weights model 1 by
    # 5) stops the second optimizer alone, though both losses reach both models
    assert loud.skipped == (False, True), loud.verdict()


def test_penalty_unscaled_matches_fp32_and_the_scaled_one_is_off_by_the_scale():
    for dtype in (torch.float16, torch.bfloat16):
        right = penalty.check_penalty(dtype=dtype)
        assert right.ok, right.verdict()
    wrong = penalty.check_penalty(penalty.penalty_step_without_unscaling)
    assert not wrong.ok and not wrong.update.ok
    assert abs(wrong.difference + 1 - 1024) < 1  # the scale of the check's scaler


def penalty_of_detached_gradients(
    model, optimizer, scaler, images, labels, device_type, dtype
):
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    params = list(model.parameters())
    # wrong: no create_graph, the penalty has the right value but no gradient
    scaled = torch.autograd.grad(scaler.scale(loss), params, retain_graph=True)
    grads = [g / scaler.get_scale() for g in scaled]
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        penalty_value = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + penalty_value
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return penalty_value.detach()


def test_penalty_check_compares_the_update_not_only_the_value():
    wrong = penalty.check_penalty(penalty_of_detached_gradients)
    assert wrong.penalty.ok, wrong.verdict()  # the value alone would pass
    assert not wrong.update.ok and not wrong.ok, wrong.verdict()


def test_custom_function_receives_fp32_only_with_cast_inputs():
    right = custom_function.check_custom_function()
    assert right.ok and right.received == "float32" and right.output_finite
    assert right.grad_dtype == "float16"  # the gradient returns in the input's dtype
    wrong = custom_function.check_custom_function(cast_inputs=None)
    assert not wrong.ok and wrong.received == "float16" and not wrong.output_finite


def predict_without_eval(model, images, device_type, dtype):
    # model.eval() left out: the model stays in train mode, as training left it,
    # and batch norm uses the batch's statistics
    with torch.inference_mode(), torch.autocast(device_type, dtype=dtype):
        return model(images).softmax(dim=1)


def test_inference_matches_fp32_with_less_memory_and_fails_without_eval():
    for dtype in (torch.bfloat16, torch.float16):
        c = inference.check_inference(dtype=dtype, batch=2, size=16)
        assert c.ok, c.verdict()
        assert c.amp_bytes < c.fp32_bytes
    wrong = inference.check_inference(predict_without_eval, batch=2, size=16)
    assert not wrong.ok and wrong.difference > wrong.tolerance, wrong.verdict()


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_one_and_fail_unwrapped():
    right = ddp.check_ddp(steps=2)
    assert right.ok, [r.verdict() for r in right.results]
    wrong = ddp.check_ddp(dtypes=(None,), steps=2, wrap=False)  # no gradient averaging
    assert not wrong.ok, [r.verdict() for r in wrong.results]


def test_compile_keeps_the_casts_and_the_step_breaks_with_or_without_scaler():
    c = compiled.check_compile("aot_eager", size=8)
    assert c.backend == "aot_eager" and c.ok
    assert c.graph_casts["forward"] == c.eager_casts > 0
    assert c.graph_breaks >= 1 and c.graphs >= 2
    # every break, not one per explain() reason: more reasons than breaks it names
    assert len(c.break_reasons) >= c.graph_breaks
    # the step without a GradScaler breaks as often, at loss.backward()
    assert (c.plain_graphs, c.plain_graph_breaks) == (c.graphs, c.graph_breaks)
    assert any("Tensor.backward()" in r for r in c.plain_break_reasons)
    # one graph holds the forward's operators with or without the scaler
    assert c.op_graphs == c.plain_op_graphs == 1
    # the explicit graph_break() the optimizer's step calls is counted
    assert any("graph_break()" in r for r in c.plain_break_reasons)
    scaler_only = c.scaler_breaks()
    assert any("GradScaler" in r for r in scaler_only)
    assert not any("Tensor.backward()" in r for r in scaler_only)


def test_ladder_compile_rows_read_rung_5_beside_rung_4():
    rows = ch8.ladder_compile_rows(load_results_dir(FIXTURES).gpu_ladders())
    assert rows and all(len(r) == 5 for r in rows)
    gpu, label, eager, fast, speedup = rows[0]
    assert speedup == eager / fast and "Fixture" in gpu
    assert ch8.ladder_compile_rows([]) == []


def test_checkpointing_cuts_erfnet_memory():
    rows = checkpointing.memory_rows(16, 32, repeats=1)
    by = {r.setting.split(" ")[0]: r for r in rows}
    assert [r.setting for r in rows][0] == "fp32" and len(rows) == 4
    assert by["checkpointing"].peak_bytes < by["fp32"].peak_bytes
    assert by["both"].peak_bytes < by["AMP"].peak_bytes
    assert "least memory: checkpointing" in ch8.memory_verdict(rows)


def test_allocated_bytes_meter_counts_new_storages_not_views_or_inputs():
    x = torch.zeros(1000)  # made before: not counted
    with AllocatedBytesMeter() as m:
        y = x + 1  # 4000 bytes
        v = y.view(10, 100)  # a view: nothing new
        y.add_(1)  # in place: nothing new
        z = torch.ones(500, dtype=torch.float16)  # 1000 bytes
        del z  # freed: live drops, the peak stays
        w = x[:10]  # a view of an input
    assert m.peak_bytes == 5000 and m.live_bytes == 4000 and m.storages == 2
    del y, v, w


def test_fp16_or_bf16_table_and_verdict(tmp_path):
    found = load_results_dir(FIXTURES)
    gpu = ch8.gpu_16bit_runs(found)
    assert set(gpu) == {"amp-fp16", "amp-bf16"}
    here = {"amp-fp16": (1.0, 1.1), "amp-bf16": (2.0, 2.1)}
    rows = ch8.choice_rows({"fp16": 0.01, "bf16": 0.0}, 1, 3, gpu, here)
    assert all(len(r) == 4 for r in rows) and rows[0][1] == "6.55e+04"
    assert any("committed" in r[3] for r in rows)
    step = next(r for r in rows if r[0] == "GPU step (ms)")
    assert float(step[1]) == round(gpu["amp-fp16"].one_step_s * 1e3, 1)
    text = ch8.choice_verdict(gpu, here)
    ratios = ch8.gpu_step_ratios(gpu)
    assert f"per epoch {min(ratios):.3f}-{max(ratios):.3f}" in text
    # every pair of timed steps has bf16 slower: fp16 faster on this machine
    assert "on this machine, bf16 / fp16 1.95, over the timed steps" in text
    assert "1.818-2.100: fp16 faster" in text
    close = {"amp-fp16": (1.0, 1.2), "amp-bf16": (1.1, 1.15)}
    assert "within the epoch-to-epoch spread" in ch8.choice_verdict({}, close)
    one = {"amp-fp16": (1.0,), "amp-bf16": (2.0,)}
    assert "not judged" in ch8.choice_verdict({}, one)
    assert "no committed GPU run" in ch8.choice_verdict({}, one)
    assert ch8.gpu_16bit_runs(load_results_dir(tmp_path)) == {}


def test_fp16_or_bf16_verdict_on_the_committed_h200_runs_is_within_the_spread():
    gpu = ch8.gpu_16bit_runs(load_results_dir(None))
    if not gpu:  # the committed runs are part of the repository
        raise AssertionError("no committed fp16/bf16 GPU pair in data/results")
    ratios = ch8.gpu_step_ratios(gpu)
    assert min(ratios) < 1 < max(ratios)  # one epoch had bf16 faster
    text = ch8.choice_verdict(gpu, {"amp-fp16": (1.0,), "amp-bf16": (1.0,)})
    assert "resolves no difference" in text and "picks bf16" in text
    # the counts are the data's: fp16 faster in every epoch whose ratio is above 1
    n_fp16 = sum(r > 1 for r in ratios)
    assert f"fp16 faster in {n_fp16} of {len(ratios)} timed epochs" in text
    assert f"bf16 in {len(ratios) - n_fp16} " in text
    # rule 2 on the page: each run's last epoch moved more than the gap between them
    gap = abs(
        gpu["amp-bf16"].final_val_pixel_accuracy
        - gpu["amp-fp16"].final_val_pixel_accuracy
    )
    assert min(ch8.last_epoch_changes(gpu).values()) > gap


def test_custom_function_bf16_without_cast_stays_finite():
    c = custom_function.check_custom_function(cast_inputs=None, dtype=torch.bfloat16)
    assert c.received == "bfloat16" and c.output_finite  # exp(12) fits bf16


def test_compile_reading_names_the_backend_that_ran():
    c = compiled.CompileCheck(
        "aot_eager", 7, {"forward": 7, "backward": 6}, None, 3, 2, [], 1.0, 1.0, 0.1
    )
    text = ch8.compile_reading(c)
    assert "every cast" in text and "aot_eager" in text and "nothing was fused" in text
    c.kernels, c.backend, c.graph_casts = 5, "inductor", {"forward": 6, "backward": 6}
    text = ch8.compile_reading(c)
    assert "6 of the eager forward's 7" in text and "into 5 kernels" in text


def test_checkpointed_block_inputs_are_fp32_in_the_encoder_without_fp16_stream():
    ref = checkpointing.block_input_dtypes(16, 32)
    assert set(ref["encoder"]) == {"float32"}
    assert "bfloat16" in ref["decoder"]
    stream = checkpointing.block_input_dtypes(16, 32, fp16_stream=True)
    assert stream["encoder"].get("bfloat16", 0) > stream["encoder"].get("float32", 0)
    assert sum(ref["encoder"].values()) == sum(stream["encoder"].values())
    assert "encoder 16 float32" in ch8.stored_inputs_text(ref)


def test_flushed_fractions_fp16_loses_what_bf16_keeps():
    g = torch.tensor([1e-9, 1e-3, 0.0, 1.0])
    f = fp16_or_bf16.flushed_fractions([g])
    assert abs(f["fp16"] - 1 / 3) < 1e-6 and f["bf16"] == 0.0


def test_the_stored_inputs_sentence_names_both_models_counts():
    line = ch8.stored_inputs_verdict(
        {"encoder": {"float32": 16}},
        {"encoder": {"bfloat16": 15, "float32": 1}},
        "bf16",
    )
    assert "under autocast (bf16)" in line
    assert "(measured here): encoder 16 float32; with ERFNet's" in line
    assert line.endswith("on: encoder 15 bfloat16, 1 float32.")


def test_relative_difference_and_rounding_tolerance_of_the_shared_checks():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0])
    assert tiny.relative_difference(a, b) == 0.5  # |2 - 4| over 4
    zero = torch.zeros(2)
    assert tiny.relative_difference(a, zero) == 2.0  # no scale: the absolute gap
    assert tiny.rounding_tolerance(None) == 64 * 2.0**-24
    assert tiny.rounding_tolerance(torch.bfloat16) == 4 * 2.0**-8
    assert tiny.rounding_tolerance(torch.float16, units=1) == 2.0**-11


@pytest.mark.slow
def test_fsdp2_mixed_precision_matches_one_fp32_process_and_fails_unsharded():
    c = fsdp.check_fsdp(steps=2)
    assert c.ok, [r.verdict() for r in c.runs]
    by = {r.reduce_dtype: r for r in c.runs}
    assert by["float32"].reduced_in == ["float32"]
    assert by["bfloat16"].reduced_in == ["bfloat16"]
    assert by["None"].reduced_in == ["bfloat16"]  # reduce_dtype defaults to param's
    assert {r.sharded_dtype for r in c.runs} == {"float32"}  # the optimizer's weights
    assert set(by["float32"].saved) - {"int64"} == {"bfloat16"}  # all saved in bf16
    assert "float32" in c.autocast_saved and "bfloat16" in c.autocast_saved
    wrong = fsdp.check_fsdp(reduce_dtypes=(None,), steps=2, wrap=False)
    assert not wrong.ok and wrong.runs[0].reduced_in == [], wrong.runs[0].verdict()
