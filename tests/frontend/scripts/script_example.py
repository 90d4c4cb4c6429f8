"""A program using @relay run as a script (`python script_example.py`): the frontend reads the
decorated functions' source from this file, as it does for a module."""
import numpy as np

from relaydsl import Float, Int, Tensor, relay

SCALE = np.float32(0.5)


@relay
def collatz_steps(n: Int) -> Int:
    """Steps of the Collatz sequence from n down to 1 (mutual recursion with `step`)."""
    if n == 1:
        return 0
    return 1 + step(n)


@relay
def step(n: Int) -> Int:  # defined after its caller
    if n - n / 2 * 2 == 0:  # `/` floors on ints
        return collatz_steps(n / 2)
    return collatz_steps(3 * n + 1)


@relay
def smooth(x: Tensor[Float, ("n", 4)]) -> Tensor[Float, ("n", 4)]:
    def blend(a, b):
        return a * SCALE + b * (1.0 - SCALE)

    out = x
    for i in range(3):
        out = blend(out, relay.mean(out, axis=1, keepdims=True))
    return out


def main() -> None:
    print("collatz", [int(collatz_steps(n)) for n in (1, 6, 7, 27)])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    print("smooth", np.round(smooth(x), 4).tolist())
    print("type", smooth.checked_type)


if __name__ == "__main__":
    main()
