"""What fp16 and bf16 do to numbers: the formats computed, gradient statistics and loss
scaling. Imports the layers below (``core``, ``segmentation``, ``measure``).
"""
