"""The mismatch sources of the exact-zero engine (rl_lab.engines.exact), one module each; their rows,
configs and fixes' verl/TRL keys are in rl_lab.mismatch_specs.

  base             Source (the hooks every source implements), patched_linears, chunked_linear
  precision        the sampler's products in bf16 / fp16, an fp32 LM head; fix: the same on both sides
  batch_variant    split-K whose chunk count depends on the product's rows; fix: batch-invariant
  tensor_parallel  row-parallel layers summed over 1, 2, 4 or 8 shards; fix: the same shards on both sides
  truncation       top-p / top-k / min-p in the sampler; fix: Keep Sampling Mask
  weight_sync      a layer not synced, or synced through bf16; fix: a verified sync
  staleness        the sampler k optimizer steps behind (RLConfig.sampler_staleness)
"""
