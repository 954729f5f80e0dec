"""Gradients w.r.t. a call's inputs, observed on autograd's own nodes (PyTorch), without changing the graph.

The gradient a module or API call contributes to one of its inputs ``x`` is the sum of what the call's autograd
nodes send to ``x``.  The recorder observes exactly that:

1. **Before the call** (:meth:`EdgeWatch.begin`): for each positional input that needs a gradient, its gradient
   edge (``torch.autograd.graph.get_gradient_edge``: the node that will receive ``x``'s gradient and which of
   its inputs; for a leaf, its ``AccumulateGrad``), and autograd's sequence number
   (``torch._C._autograd._get_sequence_nr``): every node created from then on has a number at least as large.
2. **After the call** (:meth:`EdgeWatch.attach`): a walk from the outputs' ``grad_fn`` through the nodes created
   during the call (and only those), and a post-hook (``Node.register_hook``) on each node with an edge to an
   input.  An in-place call is covered too: its input's edge was taken before the call rebased the tensor.
3. **In the backward**: each post-hook sees its node's ``grad_inputs``, the contribution along that edge.  An input
   with one such edge gets autograd's tensor itself, recorded at once.  One with several gets the sum of the
   contributions of the backward pass, computed by the recorder in float64 (complex128 for complex gradients), for
   the record only, cast back to the gradient's dtype and recorded when autograd finishes the pass (a callback
   queued on autograd's engine, as DDP queues its own).  A contribution that never comes in a pass (its node is not
   on the way to what ``backward()`` / ``autograd.grad`` was called on) is zero in that pass; each pass replaces
   what the previous one recorded (the last pass is kept, as for the gradients w.r.t. outputs).

Nothing is added between a tensor and its consumers (no ``view_as``, copy or custom autograd Function), so autograd
sums the gradients of every tensor in the same order as without the recorder and training stays bit-identical.
(Handing the call ``x.view_as(x)``, as ``register_full_backward_hook`` and msprobe do, inserts a node whose
gradient is summed separately from ``x``'s other consumers: the sum's order, and its last bits, change.)

What cannot be observed this way is reported, never guessed (:class:`InputGrads`): an output that *is* one of the
inputs (same gradient edge: ``nn.Identity``, eval-mode dropout, ``x.contiguous()`` of a contiguous ``x``) has no node
of the call, so the gradient at the call's boundary cannot be told apart from that tensor's other consumers'
(``passthrough``); an input no node of the call sends a gradient to (``unseen``: its gradient flows through a node
made before the call, such as autocast's cached cast of a weight used twice, or the input was changed in place
through a view); the same tensor at a later position (``duplicates``: recorded at its first position).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

#: What a post-hook receives and forwards: ``deliver(position, gradient)`` once a position's sum is complete.
Deliver = Callable[[int, Any], None]
#: ``guard(fn, *args)``: the adapter's gradient hook object (``adapters.base.GradHook``) running ``fn(*args, grads)``.
Guard = Callable[..., Any]


class InputGrads:
    """One call's input-gradient bookkeeping.

    Attributes:
        watermark: autograd's sequence number before the call: nodes numbered at least this were created by it.
        edges: ``(id(node), input number) → (position, node)`` for each positional input that needs a gradient
            (the same tensor at several positions: its first position); dropped once the hooks are attached.
        expected: position → how many hooked edges send it a gradient.
        acc: position → the float64 (complex128) sum of the current backward pass, when a position has several
            edges; dtypes: the gradient's dtype, which the sum is cast back to.
        queued: whether a callback that records the sums is queued for the current backward pass.
        passthrough: positions of inputs returned as outputs unchanged.
        unseen: positions no node of the call sends a gradient to.
        duplicates: position → the first position holding the same tensor.
        failed: position → why its edge could not be taken (its gradient is not recorded).
    """

    __slots__ = ("watermark", "edges", "expected", "acc", "dtypes", "queued", "passthrough", "unseen",
                 "duplicates", "failed")

    def __init__(self, watermark: int, edges: dict[tuple[int, int], tuple[int, Any]]) -> None:
        self.watermark = watermark
        self.edges: dict[tuple[int, int], tuple[int, Any]] | None = edges
        self.expected: dict[int, int] = {}
        self.acc: dict[int, Any] = {}
        self.dtypes: dict[int, Any] = {}
        self.queued = False
        self.passthrough: set[int] = set()
        self.unseen: list[int] = []
        self.duplicates: dict[int, int] = {}
        self.failed: dict[int, str] = {}


class EdgeWatch:
    """Takes input gradient edges before a call and hooks the call's own nodes after it (module docstring).

    Args:
        torch: the torch module (real PyTorch; mindtorch has no such graph).
        collecting: the recorder's guard (a context manager) under which its own tensor operations run unrecorded.
    """

    def __init__(self, torch: Any, collecting: Callable[[], AbstractContextManager[Any]]) -> None:
        self._seq: Callable[[], int] = torch._C._autograd._get_sequence_nr
        self._edge = torch.autograd.graph.get_gradient_edge
        self._queue_callback: Callable[[Callable[[], None]], None] = (
            torch.autograd.Variable._execution_engine.queue_callback
        )
        self._torch = torch
        self._collecting = collecting

    def queue_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when autograd finishes the current backward pass (call it from inside the backward)."""
        self._queue_callback(fn)

    @staticmethod
    def available(torch: Any) -> bool:
        """True when this torch exposes what the watch needs (torch ≥ 2.2)."""
        autograd = getattr(getattr(torch, "_C", None), "_autograd", None)
        graph = getattr(getattr(torch, "autograd", None), "graph", None)
        engine = getattr(getattr(getattr(torch, "autograd", None), "Variable", None), "_execution_engine", None)
        return (
            callable(getattr(autograd, "_get_sequence_nr", None))
            and callable(getattr(graph, "get_gradient_edge", None))
            and callable(getattr(engine, "queue_callback", None))
        )

    def begin(self, args: Sequence[Any], wants_grad: Callable[[Any], bool]) -> InputGrads | None:
        """Before the call: the gradient edges of the positional ``args`` that need a gradient, or None when
        none does."""
        edges: dict[tuple[int, int], tuple[int, Any]] = {}
        failed: dict[int, str] = {}
        duplicates: dict[int, int] = {}
        for i, arg in enumerate(args):
            if not wants_grad(arg):
                continue
            try:
                edge = self._edge(arg)
            except Exception as exc:  # e.g. a sparse leaf: torch finds a leaf's edge through a view
                failed[i] = f"its gradient edge could not be taken ({type(exc).__name__}); not recorded"
                continue
            key = (id(edge.node), edge.output_nr)
            if key in edges:
                duplicates[i] = edges[key][0]
            else:
                edges[key] = (i, edge.node)
        if not edges and not failed:
            return None
        grads = InputGrads(self._seq(), edges)
        grads.failed = failed
        grads.duplicates = duplicates
        return grads

    def edge_key(self, tensor: Any) -> tuple[int, int] | None:
        """The ``(id(node), input number)`` of ``tensor``'s gradient edge, or None when it has none."""
        node = tensor.grad_fn
        if node is not None:
            return id(node), tensor.output_nr
        if not getattr(tensor, "requires_grad", False):
            return None
        edge = self._edge(tensor)
        return id(edge.node), edge.output_nr

    def is_passthrough(self, grads: InputGrads, tensor: Any) -> int | None:
        """The input position ``tensor`` is, unchanged (the same gradient edge), else None."""
        if grads.edges is None:
            return None
        key = self.edge_key(tensor)
        hit = grads.edges.get(key) if key is not None else None
        return None if hit is None else hit[0]

    def attach(
        self,
        grads: InputGrads,
        outputs: Sequence[Any],
        deliver: Deliver,
        guard: Guard,
    ) -> None:
        """After the call: hook the nodes the call created that send gradients to its inputs.

        Args:
            grads: from :meth:`begin`; its ``edges`` are released here.
            outputs: the call's output tensors that need a gradient (pass-through ones excluded by the caller).
            deliver: called with ``(position, gradient)``: at once for a position with one edge (autograd's
                tensor itself), at the end of the backward pass for one with several (their float64 sum cast to
                the gradient's dtype).
            guard: ``guard(fn, *args)`` makes the adapter's gradient hook (``GradHook``) that runs
                ``fn(*args, grad_inputs)`` and never raises; its ``fire_node`` is registered on each node.
        """
        edges = grads.edges
        grads.edges = None
        if not edges:
            return
        watermark = grads.watermark
        visited: list[Any] = []  # keeps every node visited alive, so no id is reused during the walk
        seen: set[int] = set()
        stack: list[Any] = []
        for t in outputs:
            node = t.grad_fn
            if node is not None and id(node) not in seen and node._sequence_nr() >= watermark:
                seen.add(id(node))
                stack.append(node)
        while stack:
            node = stack.pop()
            visited.append(node)
            hits: list[tuple[int, int]] = []
            for k, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                hit = edges.get((id(nxt), nr))
                if hit is not None:
                    hits.append((k, hit[0]))
                elif id(nxt) not in seen and nxt._sequence_nr() >= watermark:
                    seen.add(id(nxt))
                    stack.append(nxt)
            if hits:
                for _, pos in hits:
                    grads.expected[pos] = grads.expected.get(pos, 0) + 1
                self._hook_node(node, hits, grads, deliver, guard)
        grads.unseen = sorted(
            pos for pos, _ in edges.values() if pos not in grads.expected and pos not in grads.passthrough
        )

    def _hook_node(
        self,
        node: Any,
        hits: list[tuple[int, int]],
        grads: InputGrads,
        deliver: Deliver,
        guard: Guard,
    ) -> None:
        finish = guard(EdgeWatch._finish_pass, self, grads, deliver)
        node.register_hook(guard(EdgeWatch._record_node, self, hits, grads, deliver, finish).fire_node)

    def _record_node(
        self, hits: list[tuple[int, int]], grads: InputGrads, deliver: Deliver, finish: Any, grad_inputs: Any
    ) -> None:
        """A hooked node ran: its gradients w.r.t. the watched inputs (``hits``: ``(index in grad_inputs,
        input position)``)."""
        for k, pos in hits:
            self._contribute(grads, pos, grad_inputs[k], deliver, finish)

    def _contribute(
        self, grads: InputGrads, pos: int, grad: Any, deliver: Deliver, finish: Any
    ) -> None:
        if grad is None:
            return  # this edge carries nothing in this pass (zero)
        if grads.expected.get(pos, 0) <= 1:
            deliver(pos, grad)
            return
        torch = self._torch
        with self._collecting(), torch.no_grad():
            wide = grad.to(torch.complex128 if grad.is_complex() else torch.float64)
            prev = grads.acc.get(pos)
            grads.acc[pos] = wide if prev is None else prev + wide
            grads.dtypes[pos] = grad.dtype
        if not grads.queued:
            grads.queued = True
            self._queue_callback(lambda: finish.fire(None))

    def _finish_pass(self, grads: InputGrads, deliver: Deliver, _unused: Any = None) -> None:
        """End of a backward pass: record each summed position (and start the next pass from zero)."""
        grads.queued = False
        sums, grads.acc = grads.acc, {}
        torch = self._torch
        for pos, total in sums.items():
            with self._collecting(), torch.no_grad():
                value = total.to(grads.dtypes[pos])
            deliver(pos, value)
