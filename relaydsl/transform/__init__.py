"""Relay-to-Relay transforms, one per file.

- gradient.py: higher-order reverse-mode AD; ``lower_grads(mod)`` replaces grad nodes
  by ordinary Relay (innermost first), the paper's Grad node made executable;
- first_order_gradient.py: the reference-free adjoint program for straight-line code,
  used by ``lower_grads(mod, first_order=True)``;
- pass_infra.py: ``Pass``, ``module_pass``, ``Sequential`` and ``PassContext`` (opt_level,
  disabled passes, required passes; the module is re-typed after every pass);
- graph_normal_form.py: ``to_graph_normal_form(mod)`` inlines let-bound pure dataflow into
  a DAG of shared nodes (same scope only);
- fuse_ops.py: ``fuse_ops(mod, fuse_opt_level=2)``, operator fusion (2019 paper §4.1, TVM's
  FuseOps): post-dominator-tree grouping into primitive functions;
- a_normal_form.py: ``to_a_normal_form(mod)`` binds every computation once, in order, in the
  innermost scope enclosing its uses.

The fusion pipeline, in order::

    to_graph_normal_form -> fuse_ops -> to_a_normal_form
    # or: Sequential([FuseOps, ToANormalForm]) (FuseOps requires ToGraphNormalForm)
"""
from relaydsl.transform.instrument import DumpIR, PassInstrument, PassTimingInstrument, PrintIR
from relaydsl.transform.pass_infra import Pass, PassContext, Sequential, module_pass

__all__ = ["Pass", "PassContext", "PassInstrument", "PassTimingInstrument", "PrintIR", "DumpIR",
           "Sequential", "module_pass"]
