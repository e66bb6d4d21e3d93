"""TAP output of the documentation checkers: one "ok N - NAME" or
"not ok N - NAME" line per check, a failure's detail after it as "# "
lines."""

import sys


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def result(self, ok, name, detail=()):
        """detail: a text or a sequence of texts, shown on failure only."""
        self.n += 1
        if ok:
            print("ok %d - %s" % (self.n, name))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name))
            if isinstance(detail, str):
                detail = [detail.rstrip("\n")]
            for line in detail:
                for part in str(line).split("\n"):
                    print("# " + part)
        sys.stdout.flush()

    def expect(self, name, problems):
        """A check that passes when it found no problems."""
        self.result(not problems, name, problems)
