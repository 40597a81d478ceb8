"""Memory: the tensors autograd saves for backward (``saved``). Timelines and peaks on either
device are the measuring core's (``perflab.measure.timeline``); activation checkpointing is an
implementation (``perflab.implementations.checkpointing``)."""
