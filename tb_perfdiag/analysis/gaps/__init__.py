"""Device idle gaps: the busy set, the split of each gap by cause, the host ops in a gap, the tf.data stage it waited for."""
