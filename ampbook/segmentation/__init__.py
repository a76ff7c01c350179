"""The network and its data: ERFNet, Cityscapes and its synthetic stand-in, the metrics
and the official-style evaluation. Imports only ``ampbook.core``.
"""
