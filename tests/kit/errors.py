"""The one exception the kit raises for a step that failed."""


class HarnessError(RuntimeError):
    """Starting, stopping or waiting for a server, mount or process failed;
    the message says which and why (with the end of its log)."""


class WaitTimeout(HarnessError, TimeoutError):
    """wait_for() gave up: the condition did not hold in time."""
