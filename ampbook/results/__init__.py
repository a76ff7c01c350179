"""Measured results read from a folder: the one place the chapters read them from.

    rs = load_results_dir(results_dir)          # default: data/results
    for pair in rs.pairs(): print(pair.label, pair.speedup, pair.memory_ratio)

Files are read recursively, sorted by path, and recognised by their ``schema`` field:
training runs (``ampbook.train``) -> ``TrainRun``; tensor-core sweeps
(``ampbook.chapters.ch2.bench_matmul``) -> ``MatmulSweep``; per-layer profiles, measured
time per ERFNet module beside the cost model's prediction (``booktools.layers``) ->
``LayerProfile``; loader sweeps, images/s by worker count (``booktools.layers``) ->
``LoaderSweep``; ladders (``python -m ampbook.bench ladder``) -> ``Ladder``. Any other
JSON, or a file that fails its schema's checks, is listed in ``ResultSet.ignored`` with
the reason, never silently mixed in.

One definition of each number, used by every chapter:

* **Epoch time** (``TrainRun.epoch_s``): the median ``wall_s`` (training loop) of the
  epochs after the first; of all epochs when there is only one. The first epoch pays for
  warm-up (cuDNN's algorithm search, the allocator growing, workers starting); the
  median keeps one disturbed epoch from moving the figure. Validation and checkpoints
  are not in it. ``step_s`` and ``data_wait_s`` are the same median of the time inside
  the step function and the time waiting for the loader.
* **Memory** (``TrainRun.memory_bytes``): on CUDA the peak of
  ``torch.cuda.max_memory_allocated`` over the training loops (``"peak CUDA
  allocated"``); on a CPU, which has no allocator peak to read, the bytes autograd saved
  for backward in one step (``"saved for backward"``). ``cuda_reserved_bytes`` is the
  reserved CUDA memory (roughly what ``nvidia-smi`` sees).

Runs pair (``pair_runs``) only when they ran on the same device with the same
``Setting`` (resolution, batch, memory format, workers, training images, synthetic or
real data): an fp32 baseline (TF32 on and strict apart) against an AMP run.
"""

from __future__ import annotations

from ampbook.core.modes import MODES
from ampbook.results.folder import (
    ResultSet,
    load_results_dir,
    read_file,
)
from ampbook.results.ladder import (
    Ladder,
    LadderCell,
    read_ladder,
)
from ampbook.results.schema import (
    LADDER_SCHEMA,
    LAYER_SCHEMA,
    LOADER_SCHEMA,
    MODE_LABELS,
    PEAK_CUDA,
    SAVED_FOR_BACKWARD,
    TRAIN_SCHEMA_VERSION,
    ResultsError,
    provenance,
)
from ampbook.results.sweeps import (
    LayerProfile,
    MatmulSweep,
    read_layer_profile,
    read_loader,
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
    "MODES",
    "MODE_LABELS",
    "PEAK_CUDA",
    "SAVED_FOR_BACKWARD",
    "TRAIN_SCHEMA_VERSION",
    "Ladder",
    "LadderCell",
    "LayerProfile",
    "MatmulSweep",
    "ResultSet",
    "ResultsError",
    "RunPair",
    "Setting",
    "TrainRun",
    "load_results",
    "load_results_dir",
    "pair_runs",
    "provenance",
    "read_file",
    "read_ladder",
    "read_layer_profile",
    "read_loader",
    "summarise_run",
]
