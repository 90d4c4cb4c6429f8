"""Tools to see what the compiler makes of a program: ``visualize`` (a dataflow graph in
Graphviz's DOT language) and ``to_python`` (the program as runnable Python and NumPy)."""
