"""Deletion with Noisy-GD (Chourasia & Shah 2023)."""
