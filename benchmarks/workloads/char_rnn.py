"""The character-level RNN of the PyTorch tutorials on the names corpus (relaydsl.datasets.names):
scoring a name, and generating one greedily.

A step reads the language (one-hot, 18), a character (one-hot over the alphabet and the
end-of-name marker, 59) and the hidden state (128)::

    combined = [language; char; h]
    h' = W_h combined + b_h;   out = log_softmax(W_o combined + b_o)      (the tutorial's
                                                                         i2h and i2o)

- ``charrnn-score``: the log-likelihood of a real name of 7 letters given its first letter
  (inputs: its letters; targets: the letters after each, then the end marker), a loop over
  the rows of a tensor of one-hot characters; the name is the corpus's first Russian name
  of 7 letters.
- ``charrnn-generate``: greedy generation of up to 20 characters from a start letter (the
  same name's first), stopping at the end marker. relaydsl in two variants: the characters
  as a ``relay.List`` built with ``relay.Cons`` by a recursive local function ("list"), and
  written into a tensor in a ``while`` loop ("tensor"). The weights are random, so the
  names are not names; what is timed is the loop.

relaydsl: ``@relay`` functions taking the weights as arguments, loops written in Python
(``for``/``while``, turned into Relay loops). JAX: ``lax.scan`` (score) and
``lax.while_loop`` (generate) under ``jax.jit``. NumPy and PyTorch eager: Python loops;
torch.compile: the step compiled, the loop in Python.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness import Case
from benchmarks.workloads.common import (
    build,
    jax_modules,
    normal,
    rng,
    specialize,
    torch_module,
)
from relaydsl import Float, Int, Tensor, relay
from relaydsl.datasets.names import END, LANGUAGES, NUM_CHARS, encode, names
from relaydsl.frontend.zoo.char_rnn import list_items

LANGS, CHARS, HIDDEN, NAME_LENGTH, MAX_LENGTH = len(LANGUAGES), NUM_CHARS, 128, 7, 20
COMBINED = LANGS + CHARS + HIDDEN
LANGUAGE = "Russian"
WEIGHTS = ("i2h_w", "i2h_b", "i2o_w", "i2o_b")
SHARED_NAMES = Path(__file__).resolve().parents[3] / "shared" / "data" / "names"


# ---- relaydsl ----------------------------------------------------------------------------------
def score(language: Tensor[Float, (1, LANGS)], inputs: Tensor[Float, (N, CHARS)],  # noqa: F821
          targets: Tensor[Float, (N, CHARS)],  # noqa: F821  (N, H bound by specialize)
          i2h_w: Tensor[Float, (H, COMBINED)], i2h_b: Tensor[Float, H],  # noqa: F821
          i2o_w: Tensor[Float, (CHARS, COMBINED)], i2o_b: Tensor[Float, CHARS]) -> Float:
    h = relay.zeros((1, H))  # noqa: F821
    total = relay.zeros(())
    for char, target in (inputs, targets):
        combined = relay.concatenate((language, relay.expand_dims(char, 0), h), axis=1)
        out = relay.log_softmax(relay.dense(combined, i2o_w) + i2o_b, axis=1)
        h = relay.dense(combined, i2h_w) + i2h_b
        total = total + relay.sum(out * relay.expand_dims(target, 0))
    return total


def generate_list(language: Tensor[Float, (1, LANGS)], start: Tensor[Float, (1, CHARS)],
                  i2h_w: Tensor[Float, (H, COMBINED)], i2h_b: Tensor[Float, H],  # noqa: F821
                  i2o_w: Tensor[Float, (CHARS, COMBINED)], i2o_b: Tensor[Float, CHARS]
                  ) -> relay.List[Int]:
    def more(char: Tensor[Float, (1, CHARS)], h: Tensor[Float, (1, H)],  # noqa: F821
             budget: Int) -> relay.List[Int]:
        """The next (at most `budget`) characters after `char`."""
        if budget == 0:
            return relay.Nil()
        combined = relay.concatenate((language, char, h), axis=1)
        best = relay.argmax(relay.log_softmax(relay.dense(combined, i2o_w) + i2o_b, axis=1),
                            axis=1)
        if best[0] == END:
            return relay.Nil()
        return relay.Cons(best[0], more(relay.one_hot(best, 1.0, 0.0, depth=CHARS),
                                        relay.dense(combined, i2h_w) + i2h_b, budget - 1))
    return more(start, relay.zeros((1, H)), M)  # noqa: F821  (M bound by specialize)


def generate_tensor(language: Tensor[Float, (1, LANGS)], start: Tensor[Float, (1, CHARS)],
                    i2h_w: Tensor[Float, (H, COMBINED)], i2h_b: Tensor[Float, H],  # noqa: F821
                    i2o_w: Tensor[Float, (CHARS, COMBINED)], i2o_b: Tensor[Float, CHARS]
                    ) -> Tensor[Int, (M,)]:  # noqa: F821
    out = relay.full(END, (M,), "int32")  # noqa: F821
    char, h = start, relay.zeros((1, H))  # noqa: F821
    i = 0
    best = relay.zeros((1,), "int32")
    while i < M and best[0] != END:  # noqa: F821
        combined = relay.concatenate((language, char, h), axis=1)
        best = relay.argmax(relay.log_softmax(relay.dense(combined, i2o_w) + i2o_b, axis=1),
                            axis=1)
        h = relay.dense(combined, i2h_w) + i2h_b
        out = out + relay.one_hot(i, best[0] - END, 0, depth=M, dtype="int32")  # noqa: F821
        char = relay.one_hot(best, 1.0, 0.0, depth=CHARS)
        i = i + 1
    return out


# ---- data ------------------------------------------------------------------------------------
def corpus_name(length: int = NAME_LENGTH, language: str = LANGUAGE) -> str:
    """The corpus's first name of `language` with `length` letters."""
    return next(name for name, lang in names(fallbacks=[SHARED_NAMES])
                if lang == language and len(name) == length)


def weights(hidden: int = HIDDEN, seed: int = 0) -> dict[str, np.ndarray]:
    r = rng(seed)
    combined = LANGS + CHARS + hidden
    return {"i2h_w": normal(r, (hidden, combined), 1 / np.sqrt(combined)),
            "i2h_b": normal(r, (hidden,), 0.1),
            "i2o_w": normal(r, (CHARS, combined), 1 / np.sqrt(combined)),
            "i2o_b": normal(r, (CHARS,), 0.1)}


def name_data(name: str, language: str = LANGUAGE):
    """(language (1, 18), inputs (n, 59), targets (n, 59)): the name's letters, and the letter
    after each, then the end marker; one-hot rows."""
    chars = encode(name)
    eye = np.eye(CHARS, dtype=np.float32)
    return (np.eye(LANGS, dtype=np.float32)[[LANGUAGES.index(language)]], eye[chars],
            eye[[*chars[1:], END]])


def until_end(indices: np.ndarray) -> np.ndarray:
    """The generated characters before the first end marker."""
    indices = np.asarray(indices, np.int32).reshape(-1)
    ends = np.flatnonzero(indices == END)
    return indices[:ends[0]] if ends.size else indices


# ---- NumPy, JAX, PyTorch -----------------------------------------------------------------------
def numpy_step(w: dict[str, np.ndarray], language, char, h):
    combined = np.concatenate((language, char, h), axis=1)
    scores = combined @ w["i2o_w"].T + w["i2o_b"]
    shifted = scores - scores.max(axis=1, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return out, combined @ w["i2h_w"].T + w["i2h_b"]


def numpy_score(w, language, inputs, targets) -> np.float32:
    h = np.zeros((1, w["i2h_b"].shape[0]), np.float32)
    total = np.float32(0)
    for char, target in zip(inputs, targets):
        out, h = numpy_step(w, language, char[None], h)
        total += (out * target).sum()
    return total


def numpy_generate(w, language, start, max_length: int = MAX_LENGTH) -> np.ndarray:
    h = np.zeros((1, w["i2h_b"].shape[0]), np.float32)
    char, chars = start, []
    for _ in range(max_length):
        out, h = numpy_step(w, language, char, h)
        best = int(out.argmax())
        if best == END:
            break
        chars.append(best)
        char = np.eye(CHARS, dtype=np.float32)[[best]]
    return np.array(chars, np.int32)


def jax_functions(max_length: int = MAX_LENGTH) -> tuple[Callable, Callable]:
    """(score, generate), jitted: lax.scan and lax.while_loop."""
    jax, jnp = jax_modules()

    def step(p, language, char, h):
        combined = jnp.concatenate((language, char, h), axis=1)
        return (jax.nn.log_softmax(combined @ p["i2o_w"].T + p["i2o_b"], axis=1),
                combined @ p["i2h_w"].T + p["i2h_b"])

    def score(p, language, inputs, targets):
        def body(h, row):
            char, target = row
            out, h = step(p, language, char[None], h)
            return h, jnp.sum(out * target)
        h = jnp.zeros((1, p["i2h_b"].shape[0]), inputs.dtype)
        return jnp.sum(jax.lax.scan(body, h, (inputs, targets))[1])

    def generate(p, language, start):
        def running(carry):
            i, _, _, _, best = carry
            return (i < max_length) & (best != END)

        def body(carry):
            i, char, h, out, _ = carry
            scores, h = step(p, language, char, h)
            best = jnp.argmax(scores[0]).astype(jnp.int32)
            return (i + 1, jax.nn.one_hot(best[None], CHARS, dtype=char.dtype), h,
                    out.at[i].set(best), best)
        h = jnp.zeros((1, p["i2h_b"].shape[0]), start.dtype)
        out = jnp.full((max_length,), END, jnp.int32)
        carry = (jnp.int32(0), start, h, out, jnp.int32(-1))
        return jax.lax.while_loop(running, body, carry)[3]
    return jax.jit(score), jax.jit(generate)


def torch_step(w: dict[str, np.ndarray], compiled: bool):
    """The PyTorch step (language, char, h) -> (log-probabilities, h') with the weights `w`."""
    torch = torch_module()
    i2h, i2o = (torch.nn.Linear(w[f"{k}_w"].shape[1], w[f"{k}_w"].shape[0])
                for k in ("i2h", "i2o"))
    with torch.no_grad():
        for layer, k in ((i2h, "i2h"), (i2o, "i2o")):
            layer.weight.copy_(torch.from_numpy(w[f"{k}_w"]))
            layer.bias.copy_(torch.from_numpy(w[f"{k}_b"]))

    def step(language, char, h):
        combined = torch.cat((language, char, h), dim=1)
        return torch.log_softmax(i2o(combined), dim=1), i2h(combined)
    return torch.compile(step) if compiled else step


# ---- the rows ------------------------------------------------------------------------------------
def score_case(hidden: int = HIDDEN, name: str | None = None) -> Case:
    name = name or corpus_name()
    w = weights(hidden)
    language, inputs, targets = name_data(name)
    args = (language, inputs, targets, *(w[k] for k in WEIGHTS))

    def relaydsl_setup():
        exe = build(specialize(score, N=len(inputs), H=hidden, COMBINED=COMBINED - HIDDEN + hidden))
        return lambda: exe(*args)

    def jax_setup():
        _, jnp = jax_modules()
        fn, _ = jax_functions()
        p = {k: jnp.asarray(v) for k, v in w.items()}
        data = [jnp.asarray(a) for a in (language, inputs, targets)]
        return lambda: fn(p, *data)

    def torch_setup(compiled: bool):
        torch = torch_module()
        step = torch_step(w, compiled)
        tl, ti, tt = (torch.from_numpy(a) for a in (language, inputs, targets))

        def run():
            with torch.no_grad():
                h = torch.zeros((1, hidden))
                total = torch.zeros(())
                for char, target in zip(ti, tt):
                    out, h = step(tl, char[None], h)
                    total = total + (out * target).sum()
                return total
        return run

    return Case(f"CharRNN score, {len(inputs)} letters h{hidden}", "charrnn-score",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "numpy": lambda: (lambda: numpy_score(w, language, inputs, targets)),
                 "torch": lambda: torch_setup(False),
                 "torch_compile": lambda: torch_setup(True)},
                notes=[f"log P({name!r} | {LANGUAGE}, its first letter): a loop over the rows "
                       "of one-hot tensors; relaydsl: `for char, target in (inputs, targets)` "
                       "in @relay; JAX: lax.scan; torch.compile: the step"])


def generate_case(hidden: int = HIDDEN, start: str | None = None) -> Case:
    start = start or corpus_name()[0]
    w = weights(hidden)
    language, inputs, _ = name_data(start)
    start_row = inputs[:1]
    args = (language, start_row, *(w[k] for k in WEIGHTS))

    def relaydsl_setup(variant: str):
        template = generate_list if variant == "list" else generate_tensor
        exe = build(specialize(template, H=hidden, M=MAX_LENGTH,
                               COMBINED=COMBINED - HIDDEN + hidden))
        if variant == "list":
            return lambda: np.array(list_items(exe(*args)), np.int32)
        return lambda: until_end(exe(*args))

    def jax_setup():
        _, jnp = jax_modules()
        _, fn = jax_functions()
        p = {k: jnp.asarray(v) for k, v in w.items()}
        data = [jnp.asarray(a) for a in (language, start_row)]
        return lambda: until_end(fn(p, *data))

    def torch_setup(compiled: bool):
        torch = torch_module()
        step = torch_step(w, compiled)
        tl, ts = torch.from_numpy(language), torch.from_numpy(start_row)
        eye = torch.eye(CHARS)

        def run():
            with torch.no_grad():
                h = torch.zeros((1, hidden))
                char, chars = ts, []
                for _ in range(MAX_LENGTH):
                    out, h = step(tl, char, h)
                    best = int(out.argmax())
                    if best == END:
                        break
                    chars.append(best)
                    char = eye[best:best + 1]
                return np.array(chars, np.int32)
        return run

    return Case(f"CharRNN generate, up to {MAX_LENGTH} chars h{hidden}", "charrnn-generate",
                {"relaydsl:list": lambda: relaydsl_setup("list"),
                 "relaydsl:tensor": lambda: relaydsl_setup("tensor"), "jax": jax_setup,
                 "numpy": lambda: (lambda: numpy_generate(w, language, start_row)),
                 "torch": lambda: torch_setup(False),
                 "torch_compile": lambda: torch_setup(True)},
                notes=[f"greedy, from {start!r} in {LANGUAGE}, random weights; every system "
                       "returns the generated indices (relaydsl's list read into an array, its "
                       "tensor cut at the end marker); relaydsl list: a recursive local function "
                       "building relay.Cons cells; tensor: a `while` loop adding one_hot rows; "
                       "JAX: lax.while_loop; torch.compile: the step"])
