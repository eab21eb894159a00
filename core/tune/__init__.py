"""Tuning: sweep legal kernel configurations of a problem corpus into a SQLite database."""
