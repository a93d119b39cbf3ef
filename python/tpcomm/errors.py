"""tpcomm's exceptions: one class per C status code, each carrying tpcomm's own message."""


class TpcommError(RuntimeError):
    """A tpcomm call failed. `status` is the C API's code, `message` tpcomm's text."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidArgumentError(TpcommError, ValueError):
    """A wrong argument; the message names it."""


class NotSupportedError(TpcommError):
    """Not supported by this build or machine (e.g. a GPU rank in a host-only build)."""


class CudaError(TpcommError):
    """A CUDA call failed."""


class SystemCallError(TpcommError, OSError):
    """An OS call failed (socket, shared memory, ...)."""


class CommTimeoutError(TpcommError, TimeoutError):
    """A peer did not arrive within the timeout; the message names the rank(s)."""


class RemoteError(TpcommError):
    """Another rank failed, refused this one (e.g. a wrong secret), or went away."""


class InternalError(TpcommError):
    """A bug in tpcomm; please report it with the message."""


_BY_STATUS = {1: InvalidArgumentError, 2: NotSupportedError, 3: CudaError, 4: SystemCallError,
              5: CommTimeoutError, 6: RemoteError, 7: InternalError}


def error_for(status, message):
    return _BY_STATUS.get(status, TpcommError)(status, message)
