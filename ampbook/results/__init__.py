"""Measured results read from a folder: the one place the chapters read them from.

    from ampbook.results import load_results_dir
    rs = load_results_dir(results_dir)          # default: data/results
    for pair in rs.pairs(): print(pair.label, pair.speedup, pair.memory_ratio)

Five kinds of file, each named by its ``schema`` field, are read (recursively, sorted by
path):

* training runs (``"ampbook.train"``, written by ``ampbook.train``; ``load_results``
  checks one's schema and version) -> ``TrainRun``;
* tensor-core sweeps (``"ampbook.tensor_cores/1"``,
``ampbook.chapters.ch2.bench_matmul``) ->
  ``MatmulSweep``;
* per-layer profiles (``"ampbook.layer_profile/1"``, ``booktools.layers``):
  measured time per ERFNet module beside the cost model's prediction ->
  ``LayerProfile``;
* loader sweeps (``"ampbook.loader_sweep/1"``, ``booktools.layers.loader_record``):
  DataLoader images/s by worker count -> ``LoaderSweep``;
* ladders (``"ampbook.ladder/1"``, ``python -m ampbook.bench ladder``): the training
  step rung by rung from the post's setup to the optimised one, per precision ->
  ``Ladder``.

Any other JSON (or a file that fails its schema's checks) is listed in
``ResultSet.ignored`` with the reason, never silently mixed in.

One definition of each number, used by every chapter:

* **Epoch time** (``TrainRun.epoch_s``): the median ``wall_s`` (training loop) of the
  epochs after the first; of all epochs when there is only one. The first epoch pays for
  warm-up (cuDNN's algorithm search, the allocator growing, workers starting); the
  median keeps one disturbed epoch from moving the figure. Validation and checkpoints
  are not in it. ``step_s`` and ``data_wait_s`` are the same median over the same epochs
  of the time inside the step function and the time waiting for the loader, per epoch.
* **Memory** (``TrainRun.memory_bytes``): on CUDA the peak of
  ``torch.cuda.max_memory_allocated`` over the run's training loops (``memory_measure``
  says ``"peak CUDA allocated"``); on a CPU, which has no allocator peak to read, the
  bytes autograd saved for backward in one step (``"saved for backward"``). Reserved
  CUDA memory (what ``nvidia-smi`` sees, roughly) is ``cuda_reserved_bytes`` beside it.

Runs pair (``pair_runs``) only when they ran on the same device (same ``device_name``)
with the same setting (``Setting``: resolution, batch, memory format, workers, training
images, synthetic or real data): an fp32 baseline (TF32 on and strict apart) against an
AMP run.

The layer is a few modules, one concept each: ``schema`` (every record's schema, the
field checks, ``provenance``), ``train_runs``, ``sweeps`` (tensor-core sweeps, layer
profiles, loader sweeps), ``ladder`` and ``folder`` (``load_results_dir``). This front
door re-exports their public names: ``from ampbook import results`` then
``results.load_results_dir(...)``.
"""

from __future__ import annotations

from ampbook.core.modes import MODES
from ampbook.results.folder import (
    Ignored,
    ResultSet,
    load_results_dir,
    read_file,
)
from ampbook.results.ladder import (
    Ladder,
    LadderCell,
    LadderRung,
    read_ladder,
)
from ampbook.results.schema import (
    LADDER_SCHEMA,
    LAYER_SCHEMA,
    LOADER_SCHEMA,
    MATMUL_ROW_KEYS,
    MATMUL_SCHEMA,
    MODE_LABELS,
    PEAK_CUDA,
    SAVED_FOR_BACKWARD,
    SCHEMAS,
    TRAIN_SCHEMA,
    TRAIN_SCHEMA_VERSION,
    ResultsError,
    provenance,
)
from ampbook.results.sweeps import (
    LayerProfile,
    LayerTime,
    LoaderPoint,
    LoaderSweep,
    MatmulSweep,
    profile_pairs,
    read_layer_profile,
    read_loader,
    read_matmul,
    validate_matmul,
)
from ampbook.results.train_runs import (
    RunPair,
    Setting,
    TrainRun,
    load_results,
    pair_runs,
    summarise_run,
)

__all__ = [
    "LADDER_SCHEMA",
    "LAYER_SCHEMA",
    "LOADER_SCHEMA",
    "MATMUL_ROW_KEYS",
    "MATMUL_SCHEMA",
    "MODES",
    "MODE_LABELS",
    "PEAK_CUDA",
    "SAVED_FOR_BACKWARD",
    "SCHEMAS",
    "TRAIN_SCHEMA",
    "TRAIN_SCHEMA_VERSION",
    "Ignored",
    "Ladder",
    "LadderCell",
    "LadderRung",
    "LayerProfile",
    "LayerTime",
    "LoaderPoint",
    "LoaderSweep",
    "MatmulSweep",
    "ResultSet",
    "ResultsError",
    "RunPair",
    "Setting",
    "TrainRun",
    "load_results",
    "load_results_dir",
    "pair_runs",
    "profile_pairs",
    "provenance",
    "read_file",
    "read_ladder",
    "read_layer_profile",
    "read_loader",
    "read_matmul",
    "summarise_run",
    "validate_matmul",
]
