"""The book's precisions and modes, without torch (``--help`` needs no torch import).
``TF32_MODE``: fp32 with TF32 on (``--precision fp32 --tf32 on``); ``MODES``: what the
ladder, the doctor and the results compare."""

PRECISIONS = ("fp32", "amp-fp16", "amp-bf16")
TF32_MODE = "fp32-tf32"
MODES = (TF32_MODE, *PRECISIONS)
