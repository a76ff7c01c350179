"""The bottom layer: the command line, paths, parameters, precisions, devices, the
environment, provenance and page helpers. It imports nothing else of ampbook."""
