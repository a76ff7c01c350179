"""The bottom layer: the command line (``cli``), paths, parameters, the precision and
mode names, the device table, the environment's facts, provenance marks and page
helpers. It imports nothing else of ampbook.
"""
