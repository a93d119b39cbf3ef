"""checklist.py: the checks of the decoder's Python tests (train_losses_test.py, make_corpus_test.py):
each prints "ok" or "FAIL" and what it checked; the failures are kept for the summary and exit code."""


class Checklist:
    def __init__(self):
        self.count, self.failed = 0, []

    def __call__(self, what, ok):
        self.count += 1
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            self.failed.append(what)
        return ok
