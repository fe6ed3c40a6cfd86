"""The base every config section derives from, and the error a user mistake raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A user mistake in the configuration; the message names the field and the reason."""


class Section(BaseModel):
    """A config table: unknown keys are refused, assignments are validated, and no number is
    infinite or NaN (a learning rate or a timeout of inf would reach the cluster otherwise)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
