"""The cost model and its calibration against published step times; imports every
layer below it (``core`` up to ``train``)."""
