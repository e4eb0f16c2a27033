"""Errors of the simulator and the set of exceptions the CLI reports as bad input (exit 2).

`ContractViolation` (a strategy broke the contract) is `strategies.errors.ContractViolation`.
"""

from ctxbench.strategies.calls import SignalInterrupt
from ctxbench.strategies.errors import ContractViolation, RegistryError, StrategyInputError, StrategyLoadError
from ctxbench.traces.errors import TraceError


class InputError(ValueError):
    """Bad input to a ctxbench command: a missing file, an absurd budget, a corrupt results dir."""


__all__ = ["ContractViolation", "InputError", "Interrupted", "BAD_INPUT_ERRORS"]

BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    InputError, TraceError, StrategyLoadError, StrategyInputError, RegistryError,
)


#: SIGINT or SIGTERM arrived while a command ran: it stops as after Ctrl-C (exit 128 + ``signum``).
#: Raised by the handlers of `sim.interrupts`, which note the signal first; a ``KeyboardInterrupt``
#: that is not one was raised by code (a strategy's, say), not by a signal (`strategies.calls`).
Interrupted = SignalInterrupt
