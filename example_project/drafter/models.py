"""The models: a small target language model and drafters a few thousand parameters big."""

from __future__ import annotations

import torch
from torch import nn


class TargetModel(nn.Module):
    """The model whose next-token distribution the drafters learn to predict."""

    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


class Drafter(nn.Module):
    """A cheap proposal model: about 3,000 parameters for a vocabulary of 64."""

    def __init__(self, vocab: int = 64, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.embed(tokens)))
