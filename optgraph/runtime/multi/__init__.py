"""Several GPUs: one rank per GPU (or per host), NCCL between them."""
