"""What replays measure, computed from their results: metrics, bounds, rankings, the regression gate."""
