"""Harness-State Augmentation (HSA): task-preserving rewrites of the harness with labels that follow."""

from hat.augment.compose import Envelope, Variant, augment, generate_variants, load_envelope, write_variant
from hat.augment.transforms import AUGMENTERS, FAMILIES, Augmenter, AugmentState

__all__ = [
    "AUGMENTERS",
    "FAMILIES",
    "AugmentState",
    "Augmenter",
    "Envelope",
    "Variant",
    "augment",
    "generate_variants",
    "load_envelope",
    "write_variant",
]
