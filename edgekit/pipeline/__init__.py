"""``edgekit pipeline``: one model through every stage for a target (plan, run, verdict, summary)."""
