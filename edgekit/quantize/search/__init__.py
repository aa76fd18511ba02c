"""Searching for a recipe: ``--auto`` (candidates built and timed), ``--max-drop`` (layers kept
float until the accuracy budget holds), the accuracy measurements they share, the error report."""
