"""The replay engine: the rules of a replay (`rules`), what it measures (`measures`), and the
compiled engine that runs them fast (`compiled`)."""
