def register(app):
    """Placeholder until the command lands."""
