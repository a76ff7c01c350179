"""AMP in your own loop (chapter 8): the patterns of PyTorch's AMP examples as short
loops the chapter shows from their source, and a check per pattern that runs it at a
tiny size and says whether it does what the chapter says. One module per pattern, in
the chapter's order: ``accumulation``, ``shared_scaler`` (several models, losses and
optimizers, one GradScaler), ``penalty`` (a gradient penalty), ``custom_function``,
``inference``, ``ddp``, ``fp16_or_bf16``, ``compiled`` (``torch.compile``) and
``checkpointing``; ``tiny`` holds the tiny network and the comparison they share.

Each loop is a plain function a reader can paste; each check (``check_*``) takes the
loop as an argument, so a test can hand it a variant written wrong and see it fail. A
check returns a result whose ``ok`` says whether the pattern held and whose
``verdict()`` says what was measured. What chapter 8 says of the results is
``ampbook.chapters.ch8``.
"""
