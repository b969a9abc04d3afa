# SPDX-License-Identifier: Apache-2.0
# pycheck.py - pass and fail counts for the Python parts of the shell tests, which import it
# after sys.path.insert(0, os.environ["top_srcdir"] + "/tests"):
#   check(ok, what) counts ok, or prints "FAIL: what"; done(name) prints the counts and exits
#   1 when any check failed.
import sys

passes = fails = 0


def check(ok, what):
    global passes, fails
    if ok:
        passes += 1
    else:
        print("FAIL:", what)
        fails += 1


def done(name=""):
    print("%s%d passed, %d failed" % (name + ": " if name else "", passes, fails))
    sys.exit(1 if fails else 0)
