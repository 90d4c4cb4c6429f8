"""Neural-network ops, one file per concept, each op one block (relation, references, JAX
lowering, gradient rule, compute rule, pattern, traits) ending in ``name = register(OpDef(...))``.

* linear.py: matmul, dense, batch_matmul (contractions), bias_add
* conv.py: conv2d, conv1d, conv2d_transpose;  pool.py: max_pool2d, max_pool2d_grad, avg_pool2d,
  global_avg_pool2d, global_max_pool2d, max_pool1d, avg_pool1d, max_pool3d, avg_pool3d;
  window.py: the sliding-window geometry both share (the output size, written once)
* upsampling.py: upsampling (nearest neighbour, bilinear)
* activation.py: leaky_relu, prelu, softmax, log_softmax;  loss.py: softmax_cross_entropy
* norm.py: batch_norm, layer_norm;  dropout.py: dropout
* shape.py: pad, dilate, flatten;  common.py: what the relations share

Conventions (TVM's unless noted): every op takes floating-point tensors of one dtype (integer
inputs are type errors), but for the products (matmul, dense, conv2d, conv1d: any numeric
dtype; dense's and the convolutions' ``out_dtype`` is the dtype they sum in); images are NCHW
(1-D: NCW; 3-D: NCDHW) and conv2d weights OIHW (conv1d: OIW; conv2d_transpose: IOHW); window
attributes are canonical tuples (``strides=2`` is stored as ``(2, 2)``, ``padding=1`` as
``(1, 1, 1, 1)``: the registry's "pair" and "padding" attribute kinds). Type relations keep
symbolic dims that pass through (dense on ``(n, 784)`` gives ``(n, units)``), unify dims that
must be equal, and give ``Any`` where a size would need arithmetic on a symbolic dim (a conv
output over a symbolic height).

Op objects are imported from their modules (``from relaydsl.op.nn.conv import conv2d``) or
reached as ``ops.conv2d`` (relaydsl.op.registry).
"""
# Import order: a later module's gradient rules call the earlier ones' ops.
from relaydsl.op.nn import (
    linear, shape, conv, pool, activation, loss, norm, dropout, upsampling,
)

__all__ = ["linear", "shape", "conv", "pool", "activation", "loss", "norm", "dropout",
           "upsampling"]
