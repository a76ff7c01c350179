"""What each chapter says: its verdicts, In short text and the reading of committed
data, one module per chapter. Imports the layers below and earlier chapters only.
"""
