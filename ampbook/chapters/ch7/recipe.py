"""The optimised AMP training step a reader pastes into their own loop: every rung of
chapter 7's ladder in one function (the runner's, with flags, is ``train.step``)."""

from __future__ import annotations

import torch


def optimised_training(model, images_u8, labels, dtype, lr=5e-4, compile=False):
    """An optimised AMP training step over data already on the device. ``images_u8``
    is N x 3 x H x W uint8, decoded once; ``labels`` N x H x W class indices.

    Shown on the page in chapter 7 (07_making_amp_pay)."""
    dev = images_u8.device
    torch.backends.cudnn.benchmark = True  # fastest algorithm per shape (rung 2)
    model = model.to(dev, memory_format=torch.channels_last)  # NHWC (rung 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # rung 3
    scaler = torch.amp.GradScaler(dev.type, enabled=dtype is torch.float16)
    net = torch.compile(model) if compile else model  # fusion (rung 5)
    criterion = torch.nn.CrossEntropyLoss(ignore_index=255)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)

    def step(index):  # index: a batch's positions in the cache (rung 1)
        x = (images_u8[index].float() / 255 - mean) / std
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=dtype):
            loss = criterion(net(x), labels[index].long())  # uint8 labels too
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # no .item() here: the host does not wait (rung 3)

    return step
