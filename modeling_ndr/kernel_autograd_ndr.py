"""The autograd rule every fused geometric-attention kernel shares: the CPU kernel of `geometric_ndr` and the Triton
kernels of `geometric_ndr_triton` both register it, from this module of their own (so neither imports the other at
import time)."""

import torch


def register_kernel_autograd(forward_op, backward_op) -> None:
    """The autograd rule every fused geometric-attention kernel shares (the CPU kernel here, the Triton kernels in
    `geometric_ndr_triton`): the forward saves its weights and inputs, the backward calls `backward_op`, a custom op
    `(grad, weights, content, left, right, key_valid) -> (grad_content, grad_left, grad_right)`, whose fake (shape)
    implementation for `torch.compile` is registered too.

    Args:
        forward_op: the kernel's forward custom op `(content, left, right, key_valid) -> weights`.
        backward_op: its backward custom op.
    """

    @backward_op.register_fake
    def _(grad, weights, content, left, right, key_valid):
        return torch.empty_like(content), torch.empty_like(left), torch.empty_like(right)

    def setup_context(ctx, inputs, output):
        content, left, right, key_valid = inputs
        ctx.save_for_backward(output, content, left, right, key_valid)

    def backward(ctx, grad):
        weights, content, left, right, key_valid = ctx.saved_tensors
        return (*backward_op(grad, weights, content, left, right, key_valid), None)

    forward_op.register_autograd(backward, setup_context=setup_context)
