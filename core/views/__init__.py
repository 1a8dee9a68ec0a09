"""Wording and pictures over analysis results: figures, report text, the runs table.
Views compute nothing of their own."""
