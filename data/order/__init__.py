"""Which rank trains which sample, and in which order: the balancing strategies and their
length statistics, the bucket samplers and the curricula that order them."""
