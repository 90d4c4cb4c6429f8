"""What native code (this package) and Python agree on: the run's state and its error codes.

Every function of a program's native code takes the run's state, an array of 8-byte words
(``Word``): the arena's bump pointer and end, the error a run stopped with, the chunks
taken beyond the arena, and so on. Python makes the state for each call and reads it back:
a non-zero ``Word.ERROR`` is an ``Error``, with ``Word.DETAIL`` saying which node.

The code holds no address of this process: kernels' entries, constants' data and Python's
callbacks (external kernels' among them) are read from the program's link table
(``Word.LINKS``), so equal programs share one compiled module, cached on disk like the
kernels.
"""
from __future__ import annotations

import ctypes
import math
from enum import IntEnum

import numpy as np
from llvmlite import ir

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = I8.as_pointer()
SLOTS = PTR.as_pointer()  # an object's fields: tuples, cells, ADT values, closures


def array_at(address: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The array of `shape` in the memory at `address`: a view, valid while that memory is
    (an empty array whatever the address, which may be null for no elements)."""
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype, count).reshape(shape)


class Word(IntEnum):
    """The words of a run's state."""

    CUR = 0  # the arena's bump pointer
    END = 1  # the end of the arena (or of the chunk being allocated from)
    ERROR = 2  # an Error, 0 while the run goes on
    DETAIL = 3  # which node the error is about (Error says how to read it)
    STACK_LIMIT = 4  # the lowest stack address functions may reach (a budget before)
    CHUNKS = 5  # the list of chunks taken from malloc beyond the arena: [next, size, ...]
    OVERFLOW = 6  # the bytes of those chunks
    STOP = 7  # the address of the flag a SIGINT sets
    BUDGET = 8  # the bytes of chunks a call may take (OVERFLOW beyond it: NO_MEMORY)
    WAYS = 9  # the kernel records of call sites of run-time shapes (sites.py)
    EPOCH = 10  # the loop iteration running (a reference cell holds the epoch it was made in)
    WRITTEN = 11  # the oldest epoch of a cell written into during the loop iteration
    RESULTS = 12  # the addresses of the arrays the entry writes its result into, or 0
    PEAK = 13  # the most bytes of chunks taken at once (OVERFLOW drops as chunks are freed)
    LINKS = 14  # the program's link table: the addresses its code uses (lowering.py)


STATE_WORDS = len(Word)


class Error(IntEnum):
    """Why a run stopped (``Word.ERROR``); ``Word.DETAIL`` as each says."""

    NO_CLAUSE = 1  # no clause of a match matches: DETAIL is the match's index
    TOO_DEEP = 2  # the recursion reached the stack limit
    INTERRUPTED = 3  # a SIGINT
    NO_MEMORY = 4  # the chunks took more than the budget
    WRONG_SHAPE = 5  # a kernel's input is not of its static type: DETAIL is check << 8 | input
    NO_KERNEL = 6  # making a kernel for run-time shapes failed (Python keeps what it raised)
    NO_EXCHANGE = 7  # a collective's exchange with the other ranks failed (Python keeps it)
    EXTERNAL = 8  # an external kernel's body raised (Python keeps it): DETAIL is its site


NEVER = (1 << 63) - 1  # an epoch later than any: no cell written
