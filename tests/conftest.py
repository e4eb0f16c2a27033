"""Hypothesis runs without a per-example deadline: a deadline is a wall-clock limit, and this suite asserts none."""

from hypothesis import HealthCheck, settings

settings.register_profile("ctxbench", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ctxbench")
