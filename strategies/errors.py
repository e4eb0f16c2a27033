"""Errors raised by the strategies package."""


class StrategyInputError(ValueError):
    """A state, budget or request that does not follow the contract's data format."""


class StrategyLoadError(LookupError):
    """A strategy spec that cannot be resolved or instantiated."""


class RegistryError(ValueError):
    """A registry misuse, such as registering a name twice without ``override=True``."""


class ContractViolation(RuntimeError):
    """A strategy broke the contract during a replay; the message names strategy, session and turn."""
