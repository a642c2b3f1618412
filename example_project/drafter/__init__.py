"""A tiny speculative-decoding training setup: one target model, K drafters, one thread each."""

from .models import Drafter, TargetModel
from .trainer import DrafterTrainer, TrainerOptions

__all__ = ["Drafter", "DrafterTrainer", "TargetModel", "TrainerOptions"]
