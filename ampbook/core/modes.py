"""The names of the book's precisions and modes, in one light module (no torch), so
that a command line (``python -m ampbook.train --help``) is built without importing
torch.

* ``PRECISIONS``: what the training runner runs, ``fp32`` (no autocast), ``amp-fp16``
  (autocast to float16 with a GradScaler) and ``amp-bf16`` (autocast to bfloat16).
* ``TF32_MODE`` (``fp32-tf32``): fp32 with TF32 on, the post's condition on an Ampere
  GPU (PyTorch 1.7 had TF32 on by default); the runner writes it as ``--precision
  fp32 --tf32 on`` and accepts ``--precision fp32-tf32`` for it.
* ``MODES``: the modes the ladder, the doctor and the results compare, ``TF32_MODE``
  and the precisions.

``ampbook.core.precision`` maps the precisions to their autocast dtypes;
``ampbook.results.MODE_LABELS`` names the modes for a reader.
"""

PRECISIONS = ("fp32", "amp-fp16", "amp-bf16")
TF32_MODE = "fp32-tf32"
MODES = (TF32_MODE, *PRECISIONS)
