"""Predictions: the cost model, its calibration against published step times, and the
doctor's diagnosis. Imports every layer below it (``core`` up to ``train``).
"""
