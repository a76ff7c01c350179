"""ampbook.evaluate against cityscapesscripts' own pixel-level
evaluation."""

import copy
import glob
import json
import math
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from ampbook.evaluate import main
from ampbook.segmentation.cityscapes import CLASS_NAMES, Cityscapes
from ampbook.segmentation.metrics import (
    evaluate_folder,
    save_prediction,
    save_predictions,
)
from ampbook.segmentation.model import ERFNet
from ampbook.segmentation.synthetic import synthesize


@pytest.fixture(scope="module")
def val_root(tmp_path_factory):
    return synthesize(
        tmp_path_factory.mktemp("cs"), train=1, val=5, seed=3, height=64, width=128
    )


def _noisy_predictions(root, out_dir, seed=0):
    """Ground truth with a fraction of pixels replaced by random ids of the label table,
    including ids that are ignored in evaluation (0, 4, 9...) and classes absent from
    the ground truth (e.g. 31 train)."""
    rng = np.random.default_rng(seed)
    choices = np.arange(34, dtype=np.uint8)
    for i, gt_file in enumerate(
        sorted(glob.glob(str(root / "gtFine" / "val" / "*" / "*_gtFine_labelIds.png")))
    ):
        gt = np.array(Image.open(gt_file))
        pred = gt.copy()
        flip = rng.random(gt.shape) < 0.25
        pred[flip] = rng.choice(choices, size=int(flip.sum()))
        name = gt_file.rsplit("/", 1)[1].replace(
            "_gtFine_labelIds.png", "_pred.png" if i % 2 else "_leftImg8bit.png"
        )
        sub = out_dir / ("nested" if i % 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pred).save(sub / name)
    return out_dir


def _official(root, pred_dir, tmp_path):
    """Run cityscapesscripts' evaluation functions on the same files."""
    from cityscapesscripts.evaluation import evalPixelLevelSemanticLabeling as ev

    args = copy.copy(ev.args)
    args.groundTruthSearch = str(
        root / "gtFine" / "val" / "*" / "*_gtFine_labelIds.png"
    )
    args.predictionPath = str(pred_dir)
    args.predictionWalk = None
    args.evalInstLevelScore = (
        False  # needs instanceIds files, which the synthetic set has not
    )
    args.evalPixelAccuracy = False
    args.JSONOutput = False
    args.quiet = True
    args.exportFile = str(tmp_path / "result.json")
    gts = sorted(glob.glob(args.groundTruthSearch))
    preds = [ev.getPrediction(args, gt) for gt in gts]
    return ev.evaluateImgLists(preds, gts, args)


def test_matches_cityscapesscripts(val_root, tmp_path, capsys):
    pred_dir = _noisy_predictions(val_root, tmp_path / "preds")
    ours = evaluate_folder(pred_dir, val_root, "val")
    theirs = _official(val_root, pred_dir, tmp_path)
    capsys.readouterr()
    assert ours["images"] == 5
    assert ours["miou"] == pytest.approx(theirs["averageScoreClasses"], rel=1e-12)
    for name in CLASS_NAMES:
        a, b = ours["iou"][name], theirs["classScores"][name]
        assert (a is None and math.isnan(b)) or a == pytest.approx(b, rel=1e-12), name
    # Pixel accuracy from their confusion matrix (labelIds x labelIds): correct /
    # counted pixels over the rows of the classes that are evaluated.
    conf = np.array(theirs["confMatrix"], dtype=np.int64)
    from cityscapesscripts.helpers.labels import labels

    evaluated = [l.id for l in labels if not l.ignoreInEval and l.id >= 0]
    accuracy = conf[evaluated, evaluated].sum() / conf[evaluated].sum()
    assert ours["pixel_accuracy"] == pytest.approx(accuracy, rel=1e-12)
    # the noise made some classes absent from the ground truth show up in predictions
    assert any(v == 0.0 for v in ours["iou"].values())
    assert 0.3 < ours["miou"] < 0.95


def test_perfect_predictions_score_one(val_root, tmp_path):
    for gt_file in glob.glob(
        str(val_root / "gtFine" / "val" / "*" / "*_gtFine_labelIds.png")
    ):
        shutil.copy(
            gt_file,
            tmp_path / gt_file.rsplit("/", 1)[1].replace("_gtFine_labelIds", "_pred"),
        )
    r = evaluate_folder(tmp_path, val_root)
    assert r["miou"] == 1.0 and r["pixel_accuracy"] == 1.0


def test_cli_prints_json(val_root, tmp_path, capsys):
    pred_dir = _noisy_predictions(val_root, tmp_path / "preds", seed=1)
    assert main([str(pred_dir), "--data-root", str(val_root), "--split", "val"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == evaluate_folder(pred_dir, val_root, "val")
    assert set(out["iou"]) == set(CLASS_NAMES)


def test_missing_and_duplicate_predictions_are_errors(val_root, tmp_path, capsys):
    pred_dir = _noisy_predictions(val_root, tmp_path / "preds")
    victim = sorted(pred_dir.rglob("*.png"))[0]
    stem = "_".join(victim.name.split("_")[:3])
    shutil.copy(victim, pred_dir / f"{stem}_copy.png")
    with pytest.raises(
        ValueError, match=f"several predictions for ground truth .*{stem}"
    ):
        evaluate_folder(pred_dir, val_root)
    (pred_dir / f"{stem}_copy.png").unlink()
    victim.unlink()
    with pytest.raises(
        FileNotFoundError,
        match=f"no prediction for ground truth .*{stem}_gtFine_labelIds.png",
    ):
        evaluate_folder(pred_dir, val_root)
    assert main([str(pred_dir), "--data-root", str(val_root)]) == 2
    assert "no prediction for ground truth" in capsys.readouterr().err


def test_wrong_size_and_unknown_ids_are_errors(val_root, tmp_path):
    pred_dir = _noisy_predictions(val_root, tmp_path / "preds")
    victim = sorted(pred_dir.rglob("*.png"))[0]
    Image.fromarray(np.full((32, 64), 7, np.uint8)).save(victim)
    with pytest.raises(
        ValueError, match=f"prediction {victim} is 64x32 but its ground truth"
    ):
        evaluate_folder(pred_dir, val_root)
    Image.fromarray(np.full((64, 128), 77, np.uint8)).save(victim)
    with pytest.raises(
        ValueError,
        match=rf"{victim} holds ids outside the Cityscapes label table.*\[77\]",
    ):
        evaluate_folder(pred_dir, val_root)


def test_saved_predictions_are_what_evaluate_reads(val_root, tmp_path):
    # as `python -m ampbook.train --save-predictions` writes them: one labelId PNG per
    # image at its own size, from logits at the training size
    torch.manual_seed(0)
    dataset = Cityscapes(val_root, split="val", height=32, width=64)
    model, out = ERFNet().eval(), tmp_path / "pred"
    with torch.no_grad():
        for i, pair in enumerate(dataset.pairs):
            save_predictions(model(dataset[i][0][None]), [pair], out)
    files = sorted(out.rglob("*_pred.png"))
    assert len(files) == 5
    assert Image.open(files[0]).size == (128, 64)
    r = evaluate_folder(out, val_root)
    assert r["images"] == 5 and 0.0 <= r["pixel_accuracy"] <= 1.0
    with pytest.raises(ValueError, match="trainIds"):
        save_prediction(np.full((2, 2), 19), tmp_path / "x.png")
