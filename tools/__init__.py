"""Offline tools that write the shipped assets the app reads; never imported by the app."""
