"""Run in the mindtorch environment by test_recorder_mindtorch.py: records a small MLP for two steps with
mindtorch's value_and_grad (no framework= argument: auto-detected) and writes the inputs and results."""

import json
import sys

import mindtorch  # noqa: F401  (makes "import torch" resolve to mindtorch)
import numpy as np
import torch
from mindtorch.autograd import value_and_grad

from msprobe_cmp import PrecisionDebugger

out_dir = sys.argv[1]
level = sys.argv[2]


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 4)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


rs = np.random.RandomState(11)
w = {"fc1.weight": rs.randn(4, 5), "fc1.bias": rs.randn(4), "fc2.weight": rs.randn(3, 4), "fc2.bias": rs.randn(3)}
w = {k: v.astype(np.float32) for k, v in w.items()}
x_np = rs.randn(6, 5).astype(np.float32)
net = Small()
with torch.no_grad():
    for name, p in net.named_parameters():
        p.copy_(torch.tensor(w[name]))
x = torch.tensor(x_np)
original_linear = torch.nn.functional.linear
params = list(net.parameters())

dbg = PrecisionDebugger(dump_path=out_dir + "/dump", level=level)


def f(x):
    out = net(x)
    return (out * out).sum()


vg = value_and_grad(f, params, attach_grads=False)
losses = []
for _step in range(2):
    dbg.start(net)
    loss, grads = vg(x)
    dbg.stop()
    dbg.step()
    losses.append(float(loss.asnumpy()))
dbg.close()
plain_loss, _ = vg(x)
np.savez(out_dir + "/inputs.npz", x=x_np, **w)
result = {
    "framework": dbg.framework,
    "restored": torch.nn.functional.linear is original_linear,
    "losses": losses,
    "plain_loss": float(plain_loss.asnumpy()),
}
with open(out_dir + "/result.json", "w") as fh:
    json.dump(result, fh)
