"""Shared helpers, standard library only: usable in every context (host, trainer container, service image)."""
