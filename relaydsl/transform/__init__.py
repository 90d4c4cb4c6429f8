"""Relay-to-Relay transforms, one pass per file.

- pass_infra.py: ``Pass`` (a frozen dataclass whose fields are a pass's options, declaring
  its opt_level, description and prerequisites), ``Sequential``, ``PassContext`` (opt_level,
  disabled passes, required passes; the module is re-typed after every pass), ``resolve``
  (prerequisites first) and ``module_pass``;
- pipeline.py: the passes each target runs, in order, and ``CompileOptions``;
- gradient.py: higher-order reverse-mode AD; ``LowerGrads`` replaces grad nodes by ordinary
  Relay (innermost first), the paper's Grad node made executable; ``FirstOrderGradients``
  the reference-free adjoint program of first_order_gradient.py for straight-line code;
- graph_normal_form.py: ``ToGraphNormalForm`` inlines let-bound pure dataflow into a DAG of
  shared nodes (same scope only);
- fuse_ops.py: ``FuseOps(level=2)``, operator fusion (2019 paper §4.1, TVM's FuseOps):
  post-dominator-tree grouping into primitive functions;
- a_normal_form.py: ``ToANormalForm`` binds every computation once, in order, in the
  innermost scope enclosing its uses.

Each pass file also has a function running its pass, for a quick call:
``fuse_ops(mod)`` is ``FuseOps()(mod)``. The fusion pipeline, in order::

    Sequential([FuseOps(), ToANormalForm()])   # FuseOps requires ToGraphNormalForm
"""
from relaydsl.transform.instrument import DumpIR, PassInstrument, PassTimingInstrument, PrintIR
from relaydsl.transform.pass_infra import Pass, PassContext, Sequential, module_pass

__all__ = ["Pass", "PassContext", "PassInstrument", "PassTimingInstrument", "PrintIR", "DumpIR",
           "Sequential", "module_pass"]
