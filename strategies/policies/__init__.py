"""The context policies of real coding agents (`strategies.policy`), each with its project's defaults."""
