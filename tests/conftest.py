"""Settings for the whole suite: the IR verifier runs after every pass of every build
(relaydsl/transform/verify.py), so a pass that builds bad IR fails the test that ran it."""
import os

os.environ.setdefault("RELAYDSL_VERIFY_IR", "1")
