"""Training machinery: the loops' runtime (DDP/FSDP, LR, resume), losses, examples and batches, QAT, distillation."""
