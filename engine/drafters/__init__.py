"""Drafters propose draft trees; see `engine.drafters.base.Drafter`."""
