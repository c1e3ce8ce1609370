"""Orchestrators: commands that run other commands (`lab`, `ablate`); the one room that may import commands."""
