"""Operations: metrics, health, per-object status, ``show`` and ``explain``."""
