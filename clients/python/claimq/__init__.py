"""claimq for Python: a client with a method per SQL function, and workers
that need only a handler function.  See README.md."""

from .client import Client, Job, Outcome
from .worker import AsyncWorker, Fail, JobStopped, Snooze, Worker, check_stop, sleep

__all__ = ["Client", "Job", "Outcome", "Worker", "AsyncWorker", "Fail", "Snooze",
           "JobStopped", "check_stop", "sleep"]
__version__ = "0.5.0"
