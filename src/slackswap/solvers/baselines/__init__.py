"""The published baselines: vDNN, SuperNeurons, SwapAdvisor, checkpointing and offloading."""
