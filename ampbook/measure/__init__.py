"""How the book measures: timing, module scopes, memory meters, CPU kernel probes, and
autocast's rules and casts as observed. Imports ``core`` and ``segmentation``.
"""
