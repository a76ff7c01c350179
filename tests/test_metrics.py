"""Confusion-matrix metrics on hand-computed cases and against a plain per-class
count."""

import math

import numpy as np
import pytest
import torch

from ampbook.segmentation.metrics import SegmentationMetrics


def test_hand_computed_three_classes():
    target = torch.tensor([[0, 0, 1], [1, 2, 255]])
    pred = torch.tensor([[0, 1, 1], [1, 0, 2]])
    m = SegmentationMetrics(num_classes=3)
    m.update(pred, target)
    # counted pixels: (t0,p0) (t0,p1) (t1,p1) (t1,p1) (t2,p0); the 255 pixel is left out
    assert m.confusion.tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    r = m.compute()
    # IoU = TP / (TP + FP + FN): class 0: 1/(1+1+1), class 1: 2/(2+1+0), class 2:
    # 0/(0+0+1)
    assert r["iou"] == pytest.approx([1 / 3, 2 / 3, 0.0])
    assert r["miou"] == pytest.approx((1 / 3 + 2 / 3 + 0) / 3)
    assert r["pixel_accuracy"] == pytest.approx(3 / 5)


def test_class_absent_everywhere_is_nan_and_not_averaged():
    target = torch.tensor([[0, 0], [1, 1]])
    pred = torch.tensor([[0, 1], [1, 1]])
    m = SegmentationMetrics(num_classes=4)
    m.update(pred, target)
    r = m.compute()
    assert math.isnan(r["iou"][2]) and math.isnan(r["iou"][3])
    # class 0: 1/(1+0+1); class 1: 2/(2+1+0)
    assert r["miou"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert r["pixel_accuracy"] == pytest.approx(3 / 4)


def test_class_predicted_but_absent_from_targets_counts_as_zero():
    target = torch.tensor([0, 0, 0, 0])
    pred = torch.tensor([0, 0, 0, 2])
    m = SegmentationMetrics(num_classes=3)
    m.update(pred, target)
    r = m.compute()
    assert r["iou"][0] == pytest.approx(3 / 4)
    assert r["iou"][2] == 0.0 and math.isnan(r["iou"][1])
    assert r["miou"] == pytest.approx((3 / 4 + 0) / 2)


def test_prediction_outside_the_classes_is_a_miss_of_the_target_class():
    target = torch.tensor([0, 0, 1, 1])
    pred = torch.tensor([0, 255, 1, 1])
    m = SegmentationMetrics(num_classes=2)
    m.update(pred, target)
    r = m.compute()
    assert m.confusion.tolist() == [[1, 0], [0, 2]]
    assert r["iou"] == pytest.approx([1 / 2, 1.0])
    assert r["pixel_accuracy"] == pytest.approx(3 / 4)


def test_logits_are_argmaxed():
    target = torch.tensor([[[0, 1], [2, 255]]])
    logits = torch.zeros(1, 3, 2, 2)
    logits[0, 0, 0, 0] = 1.0  # pixel (0,0) -> 0
    logits[0, 2, 0, 1] = 1.0  # pixel (0,1) -> 2
    logits[0, 2, 1, 0] = 1.0  # pixel (1,0) -> 2
    logits[0, 1, 1, 1] = 1.0  # ignored pixel
    a, b = SegmentationMetrics(3), SegmentationMetrics(3)
    a.update(logits, target)
    b.update(torch.tensor([[[0, 2], [2, 1]]]), target)
    assert torch.equal(a.confusion, b.confusion)
    assert a.confusion.tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 1]]


def test_updates_accumulate_and_reset_clears():
    g = torch.Generator().manual_seed(1)
    t = torch.randint(0, 5, (4, 8, 8), generator=g)
    t[t == 4] = 255
    p = torch.randint(0, 4, (4, 8, 8), generator=g)
    one, two = SegmentationMetrics(4), SegmentationMetrics(4)
    one.update(p, t)
    two.update(p[:1], t[:1])
    two.update(p[1:], t[1:])
    assert torch.equal(one.confusion, two.confusion)
    assert one.confusion.dtype == torch.int64 and one.confusion.shape == (4, 4)
    assert int(one.confusion.sum()) == int((t != 255).sum())
    two.reset()
    assert int(two.confusion.sum()) == 0 and math.isnan(two.compute()["miou"])


def test_matches_a_per_class_count_on_random_data():
    rng = np.random.default_rng(0)
    c = 19
    target = rng.integers(0, c, size=(3, 40, 50))
    target[rng.random(target.shape) < 0.1] = 255
    target[target == 7] = 255  # one class absent from the targets
    pred = np.where(
        rng.random(target.shape) < 0.6, target, rng.integers(0, c, size=target.shape)
    )
    pred[pred == 255] = 3
    pred[pred == 12] = 11  # one class never predicted
    m = SegmentationMetrics(c)
    m.update(torch.from_numpy(pred), torch.from_numpy(target))
    r = m.compute()
    valid = target != 255
    ious = []
    for k in range(c):
        tp = np.sum((pred == k) & (target == k) & valid)
        fp = np.sum((pred == k) & (target != k) & valid)
        fn = np.sum((pred != k) & (target == k) & valid)
        ious.append(tp / (tp + fp + fn) if tp + fp + fn else float("nan"))
    np.testing.assert_allclose(r["iou"], ious, rtol=1e-12)
    assert r["miou"] == pytest.approx(np.nanmean(ious), rel=1e-12)
    assert r["pixel_accuracy"] == pytest.approx(
        np.mean(pred[valid] == target[valid]), rel=1e-12
    )


def test_bad_shapes_and_targets_are_errors():
    m = SegmentationMetrics(3)
    with pytest.raises(ValueError, match="differs from target shape"):
        m.update(
            torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 2, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="logits must be"):
        m.update(torch.zeros(1, 4, 2, 2), torch.zeros(1, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        m.update(torch.zeros(4, dtype=torch.long), torch.tensor([0, 1, 3, 255]))


def test_confusion_stays_on_the_device_given():
    m = SegmentationMetrics(3, device="cpu")
    m.update(torch.tensor([0, 1]), torch.tensor([0, 2]))
    assert m.confusion.device.type == "cpu"


@pytest.mark.cuda
def test_on_cuda():
    m = SegmentationMetrics(3)
    m.update(
        torch.tensor([0, 1, 2], device="cuda"), torch.tensor([0, 2, 2], device="cuda")
    )
    assert m.confusion.device.type == "cuda"
    assert m.compute()["pixel_accuracy"] == pytest.approx(2 / 3)
    torch.use_deterministic_algorithms(True)
    try:
        m.update(
            torch.tensor([0, 1, 2], device="cuda"),
            torch.tensor([0, 1, 2], device="cuda"),
        )
    finally:
        torch.use_deterministic_algorithms(False)
    assert m.compute()["pixel_accuracy"] == pytest.approx(5 / 6)


def test_sort_based_count_equals_bincount():
    from ampbook.segmentation.metrics import count_values

    idx = torch.tensor([3, 0, 3, 5, 5, 5, 0])
    assert count_values(idx, 7, sort_based=True).tolist() == [2, 0, 0, 2, 0, 3, 0]
    assert torch.equal(
        count_values(idx, 7, sort_based=True), count_values(idx, 7, sort_based=False)
    )
    assert count_values(
        torch.tensor([], dtype=torch.int64), 3, sort_based=True
    ).tolist() == [0, 0, 0]
