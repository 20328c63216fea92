#!/usr/bin/env python3
"""SemiCRF inside torch.compile, torch.export and torch.autocast (docs/python.md
"torch.compile, torch.export, autocast"): a Conv1d encoder + SemiCRF (mean NLL
+ the penalty) trained one step eagerly and one step compiled with
fullgraph=True (a graph break would be an error), the loss and every gradient
compared; the model exported and run; bfloat16 scores under autocast against
the same scores cast up to float32. On the CPU by default (--device cuda for
a GPU and a CUDA build). Exits 0 saying so when torch is not installed.

    python3 examples/semicrf_compile.py [--device cpu] [--backend inductor]
"""
import argparse
import sys

try:
    import torch
except ImportError:
    print("torch is not installed: nothing to run (pip install torch)")
    sys.exit(0)

from timitseg.torch import SemiCRF

C, K, D = 5, 4, 6


class Model(torch.nn.Module):
    def __init__(self, backend):
        super().__init__()
        self.enc = torch.nn.Conv1d(D, C, 3, padding=1)
        self.crf = SemiCRF(C, K, backend=backend, init_scale=0.3, reg=0.01)

    def forward(self, feats, lengths, labels):
        scores = self.enc(feats.transpose(1, 2)).transpose(1, 2)  # [B][T][C]
        return self.crf(scores, lengths, labels=labels, reduction="mean") + self.crf.penalty()


def step(model, fn, args):
    model.zero_grad()
    loss = fn(*args)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (needs a GPU and a CUDA build)")
    ap.add_argument("--backend", default="inductor", help="torch.compile's backend (inductor, aot_eager)")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = Model("cuda" if a.device == "cuda" else "cpu").to(a.device)
    feats = torch.randn(3, 20, D, device=a.device)
    lengths = torch.tensor([20, 13, 4], device=a.device)
    labels = torch.randint(0, C, (3, 20), device=a.device)
    args = (feats, lengths, labels)

    eager = step(model, model, args)
    compiled = step(model, torch.compile(model, fullgraph=True, backend=a.backend), args)
    diff = max(float((x - y).abs().max()) for x, y in zip(eager[1], compiled[1]))
    print("torch.compile(fullgraph=True, backend=%s): loss %.6f (eager %.6f), max |gradient difference| %.1e"
          % (a.backend, compiled[0], eager[0], diff))

    ep = torch.export.export(model, args)
    with torch.no_grad():
        print("torch.export: loss %.6f; operators: %s" % (ep.module()(*args), sorted(
            {str(n.target) for n in ep.graph.nodes if "timitseg" in str(n.target)})))

    dtype = torch.bfloat16
    with torch.no_grad(), torch.autocast(a.device, dtype=dtype):
        scores = model.enc(feats.transpose(1, 2)).transpose(1, 2)
        loss = model.crf(scores, lengths, labels=labels, reduction="mean")
    with torch.no_grad():
        up = model.crf(scores.float(), lengths, labels=labels, reduction="mean")
    print("autocast: scores %s, loss %s %.6f, the scores cast up to float32: %.6f (equal: %s)"
          % (scores.dtype, loss.dtype, loss, up, bool(torch.equal(loss, up))))


if __name__ == "__main__":
    main()
