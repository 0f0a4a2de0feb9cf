"""The Docker side, on the host: the trainer container and the grader service's container and image."""
