"""Memory: timelines and peaks on either device, saved tensors, activation checkpointing."""
