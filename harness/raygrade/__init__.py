"""Ray as the engine for grading at scale (host side; needs the ``[ray]`` extra)."""
