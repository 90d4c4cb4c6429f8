"""The accelerator benchmark (issue 23): the Deep Fusion paper's five ImageNet networks."""
