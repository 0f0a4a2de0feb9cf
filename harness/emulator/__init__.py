"""The emulated trainer: loads a bundle zip as the trainer does and runs its jobs and the pre-push checks.

Standard library only (with harness.common): this package is copied whole into the trainer container.
"""
