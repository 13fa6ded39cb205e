"""Where device time goes: by op group, compute/copy/collective overlap, by user annotation, op counts."""
