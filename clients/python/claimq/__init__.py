"""claimq for Python: a client with a method per SQL function, and workers
that need only a handler function.  See README.md."""

import logging as _logging

from . import traceparent
from .client import Client, Job, Outcome
from .worker import (AsyncWorker, Fail, JobStopped, JobTimeout, Snooze, Worker, check_stop,
                     sleep)

__all__ = ["Client", "Job", "Outcome", "Worker", "AsyncWorker", "Fail", "Snooze",
           "JobStopped", "JobTimeout", "check_stop", "sleep", "traceparent"]
# The release's version: default_version in claimq.control.
__version__ = "0.8"

# A library logs to "claimq" and leaves handlers to the application.
_logging.getLogger("claimq").addHandler(_logging.NullHandler())
