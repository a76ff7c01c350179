"""ERFNet, the segmentation network of the book's experiment.

Written from the paper's description:

    E. Romera, J. M. Alvarez, L. M. Bergasa, R. Arroyo, "ERFNet: Efficient Residual
    Factorized ConvNet for Real-time Semantic Segmentation", IEEE Transactions on
    Intelligent Transportation Systems 19(1):263-272, 2018.
    doi:10.1109/TITS.2017.2750080

The network (Table I of the paper), for an input of height H and width W:

* encoder: a downsampler to 16 channels (H/2), a downsampler to 64 (H/4), five
  non-bottleneck-1D blocks (dropout 0.03), a downsampler to 128 (H/8), eight
  non-bottleneck-1D blocks with dilations 2, 4, 8, 16, 2, 4, 8, 16 (dropout 0.3);
* decoder: a transposed convolution to 64 channels (H/4), two non-bottleneck-1D blocks,
  a transposed convolution to 16 (H/2), two blocks, and a final transposed convolution
  to the classes at the input's size.

A *downsampler* (taken by the paper from ENet) concatenates a 3x3 stride-2 convolution
(giving ``out - in`` channels) with a 2x2 max-pool of its input (``in`` channels), then
applies batch norm and ReLU. A *non-bottleneck-1D* block factorises each of the two 3x3
convolutions of a residual block into a 3x1 and a 1x3 convolution with a ReLU between
them; the second pair is dilated; batch norm follows each pair, dropout ends the branch,
and the sum with the input goes through a ReLU.

Two details the paper leaves open are chosen as the authors' public code chooses them
(https://github.com/Eromera/erfnet_pytorch): convolutions carry biases (PyTorch's
default), and batch norm uses eps=1e-3.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BN_EPS = 1e-3


class Downsampler(nn.Module):
    """3x3 stride-2 conv (``out - in`` channels) beside a 2x2 max-pool, concatenated;
    BN, ReLU. With ``fp16_stream`` the pool branch is cast to the conv's dtype before
    the concatenation (see ``ERFNet``)."""

    def __init__(self, in_channels: int, out_channels: int, fp16_stream: bool = False):
        super().__init__()
        self.fp16_stream = fp16_stream
        if out_channels <= in_channels:
            raise ValueError(
                f"a downsampler widens: out_channels ({out_channels}) must exceed "
                f"in_channels ({in_channels})"
            )
        self.conv = nn.Conv2d(
            in_channels, out_channels - in_channels, 3, stride=2, padding=1
        )
        self.pool = nn.MaxPool2d(2, stride=2)
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shown on the page in chapter 7 (07_making_amp_pay)."""
        # torch.cat promotes dtypes, so under autocast (conv in low precision, pool in
        # the input's precision) the concatenation takes the wider of the two.
        conv, pool = self.conv(x), self.pool(x)
        if self.fp16_stream:
            pool = pool.to(conv.dtype)  # a no-op outside autocast
        return F.relu(self.bn(torch.cat([conv, pool], dim=1)))


class NonBottleneck1D(nn.Module):
    """Residual block of two factorised 3x3 convolutions (3x1 then 1x3), the second
    dilated."""

    def __init__(self, channels: int, dropout: float = 0.0, dilation: int = 1):
        super().__init__()
        c, d = channels, dilation
        self.conv3x1_1 = nn.Conv2d(c, c, (3, 1), padding=(1, 0))
        self.conv1x3_1 = nn.Conv2d(c, c, (1, 3), padding=(0, 1))
        self.bn1 = nn.BatchNorm2d(c, eps=BN_EPS)
        self.conv3x1_2 = nn.Conv2d(c, c, (3, 1), padding=(d, 0), dilation=(d, 1))
        self.conv1x3_2 = nn.Conv2d(c, c, (1, 3), padding=(0, d), dilation=(1, d))
        self.bn2 = nn.BatchNorm2d(c, eps=BN_EPS)
        self.dropout = nn.Dropout2d(dropout) if dropout > 0 else nn.Identity()
        self.dilation = d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv3x1_1(x))
        y = F.relu(self.bn1(self.conv1x3_1(y)))
        y = F.relu(self.conv3x1_2(y))
        y = self.dropout(self.bn2(self.conv1x3_2(y)))
        return F.relu(y + x)


class Upsampler(nn.Module):
    """3x3 stride-2 transposed convolution doubling height and width; BN, ReLU."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.ConvTranspose2d(
            in_channels, out_channels, 3, stride=2, padding=1, output_padding=1
        )
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Encoder(nn.Module):
    def __init__(self, fp16_stream: bool = False):
        super().__init__()
        self.layers = nn.Sequential(
            Downsampler(3, 16, fp16_stream),
            Downsampler(16, 64, fp16_stream),
            *(NonBottleneck1D(64, dropout=0.03) for _ in range(5)),
            Downsampler(64, 128, fp16_stream),
            *(NonBottleneck1D(128, dropout=0.3, dilation=d) for d in (2, 4, 8, 16) * 2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Decoder(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.layers = nn.Sequential(
            Upsampler(128, 64),
            NonBottleneck1D(64),
            NonBottleneck1D(64),
            Upsampler(64, 16),
            NonBottleneck1D(16),
            NonBottleneck1D(16),
        )
        # The last layer: 2x2 stride-2 transposed convolution straight to class scores.
        self.output = nn.ConvTranspose2d(16, num_classes, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.layers(x))


class ERFNet(nn.Module):
    """ERFNet: ``forward(x: N,3,H,W) -> logits N,C,H,W``, H and W divisible by 8.

    ``fp16_stream=True`` (default off: the reference ERFNet) keeps the encoder's
    residual stream 16-bit under autocast. In the reference, the first downsampler
    concatenates its convolution (16-bit under autocast) with a max-pool of the fp32
    image; ``torch.cat`` promotes the pair to fp32, and every residual block after it
    adds a 16-bit branch to an fp32 skip, so the whole encoder carries fp32
    activations. With the option each downsampler casts its pool branch to the
    convolution's dtype before the concatenation (only the first one changes anything:
    the others already receive 16-bit inputs). Without autocast the cast is a no-op:
    same parameters, same state dict, same fp32 outputs.
    """

    def __init__(self, num_classes: int = 19, fp16_stream: bool = False):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = num_classes
        self.fp16_stream = fp16_stream
        self.encoder = Encoder(fp16_stream)
        self.decoder = Decoder(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(
                "ERFNet expects an N x 3 x H x W image batch, got shape "
                f"{tuple(x.shape)}"
            )
        h, w = x.shape[-2:]
        if h % 8 or w % 8:
            raise ValueError(
                f"ERFNet needs height and width divisible by 8 (three stride-2 "
                f"stages); got {h}x{w} (H x W). Resize or pad the input, e.g. to "
                f"{h - h % 8 or 8}x{w - w % 8 or 8}."
            )
        return self.decoder(self.encoder(x))
