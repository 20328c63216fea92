#!/usr/bin/env python3
"""The recipe's encoder training step in PyTorch on the CPU, for comparison
with bench/cpu_encoder_bench (timitseg's CPU encoder).

Linear(D, W) -> dropout -> LSTM(W, W/2, L layers, bidirectional, batch_first,
dropout) on packed sequences -> Linear(W, C) -> a scalar loss (random weights
on the valid frames' scores, standing in for the CRF) -> backward -> AdamW
step. Random lengths in [--min-frames, --max-frames] (fixed seed), one warm-up
step, then --repeats timed steps; prints the median ms per step and frames/s
(valid frames per second). Exits 0 with "torch not installed, skipped" when
torch is missing.
"""
import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256, help="W (2 x per-direction H)")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--input-dim", type=int, default=39)
    ap.add_argument("--classes", type=int, default=39)
    ap.add_argument("--min-frames", type=int, default=150)
    ap.add_argument("--max-frames", type=int, default=600)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.min_frames < 1 or a.min_frames > a.max_frames or a.hidden % 2 or a.threads < 1 or a.repeats < 1:
        print("torch_cpu_step: bad sizes (need 1 <= min-frames <= max-frames, even hidden, threads >= 1, "
              "repeats >= 1)", file=sys.stderr)
        return 2
    try:
        import torch
        from torch import nn
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    except ImportError:
        print("torch_cpu_step: torch not installed, skipped")
        return 0

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    lengths = torch.randint(a.min_frames, a.max_frames + 1, (a.batch,), generator=gen)
    T = int(lengths.max())
    frames = int(lengths.sum())
    x = torch.randn(a.batch, T, a.input_dim, generator=gen)  # [B][T][D]
    w = 1e-3 * torch.randn(a.batch, T, a.classes, generator=gen)  # [B][T][C] loss weights
    valid = (torch.arange(T)[None, :] < lengths[:, None]).unsqueeze(-1)  # [B][T][1]
    w = w * valid

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_proj = nn.Linear(a.input_dim, a.hidden)
            self.drop = nn.Dropout(a.dropout)
            self.lstm = nn.LSTM(a.hidden, a.hidden // 2, num_layers=a.layers, bidirectional=True,
                                batch_first=True, dropout=a.dropout if a.layers > 1 else 0.0)
            self.projection = nn.Linear(a.hidden, a.classes)

        def forward(self, x, lengths):
            z = self.drop(self.input_proj(x))  # [B][T][W]
            packed = pack_padded_sequence(z, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # [B][T][W]
            return self.projection(out)  # [B][T][C]

    model = Encoder().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for r in range(a.repeats + 1):  # r == 0: warm-up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = (model(x, lengths) * w).sum()
        loss.backward()
        opt.step()
        ms = 1000.0 * (time.perf_counter() - t0)
        if r > 0:
            times.append(ms)
    med = statistics.median(times)
    print(f"torch_cpu_step: torch {torch.__version__} B={a.batch} T={T} D={a.input_dim} W={a.hidden} "
          f"L={a.layers} C={a.classes} dropout={a.dropout:.2f} threads={a.threads} frames={frames} "
          f"repeats={a.repeats}")
    print(f"ms/step median {med:.2f} (min {min(times):.2f}, max {max(times):.2f})  frames/s {1000.0 * frames / med:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
