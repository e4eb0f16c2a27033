"""Context manager, replay, metrics, optimal bounds, grid runner, reports and the CLI."""
