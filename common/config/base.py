"""The base every config section derives from, and the error a user mistake raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A user mistake in the configuration; the message names the field and the reason."""


class Section(BaseModel):
    """A config table: unknown keys are refused, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
