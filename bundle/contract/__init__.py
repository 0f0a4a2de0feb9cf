"""What every part of the bundle shares: the limits table, the faults with their codes, the reward shapes."""
