#!/usr/bin/env python3
"""Train the reference script's model once and write its test-set frame predictions.

The reference script is torch-semimarkov's
benchmarks/practical_demonstration/timit/timit_phoneme.py (benchmarking
branch); its code is not part of timitseg: this program imports it from the
checkout given by --torch-semimarkov and calls its own `train_model` (with
log_every = epochs, so the model returned is the last epoch's), then decodes
DATA/test.jsonl with that model exactly as the script's `evaluate` does
(Viterbi segments, end inclusive, painted onto the frames) and writes one JSON
line per test utterance, in file order:

    {"index": I, "utterance_id": ID, "phones": [39-phone name per frame]}

which `timitseg score --predictions` reads, so both programs are scored by the
same implementation. A status file (--status, default OUT with .status.json)
records ok / failed, the error (a crash, or NaN/Inf in the loss or the
parameters: the reference semi-CRF is known to diverge), the seconds taken and
the script's own metrics of the last epoch for a sanity check. A failed run
exits 3 and leaves no prediction file.

Seeds: python's random, numpy and torch (CPU and CUDA) are seeded with --seed
before anything is built; the script itself seeds nothing, so its shuffling
and initialization follow these seeds. GPU kernels may still be
nondeterministic.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from pathlib import Path

from accuracy_io import write_atomic  # this folder (the scripts run as files: it is on sys.path)

OLD_DIR = Path("benchmarks/practical_demonstration/timit")


def jsonable(x):
    """The script's metrics (dataclass dict with numpy scalars) as plain JSON values."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist") and callable(x.tolist):  # numpy arrays and scalars, torch tensors
        x = x.tolist()
        if isinstance(x, (list, tuple)):
            return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)


def import_old_script(tsm_dir: Path):
    script = tsm_dir / OLD_DIR / "timit_phoneme.py"
    if not script.is_file():
        raise SystemExit(f"error: {script}: not found (--torch-semimarkov must be a checkout of torch-semimarkov's "
                         "benchmarking branch)")
    sys.path.insert(0, str(tsm_dir / OLD_DIR))
    sys.path.insert(0, str(tsm_dir / "src"))
    import timit_phoneme  # noqa: E402  (the reference script)
    return timit_phoneme


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def decode_test(tp, model, data_dir: Path, batch_size: int, device, backend: str) -> list[dict]:
    """Frame predictions (39-phone names) of every test utterance, as the script's evaluate makes them."""
    import torch
    from torch.utils.data import DataLoader
    mean, std = tp.compute_normalization_stats(data_dir / "train.jsonl")  # what train_model uses
    test = tp.TIMITDataset(data_dir / "test.jsonl", normalize=True, mean=mean, std=std)
    loader = DataLoader(test, batch_size=batch_size, shuffle=False, collate_fn=tp.make_collate_fn(None))
    model.eval()
    out: list[dict] = []
    with torch.no_grad():
        for batch in loader:
            features = batch["features"].to(device)
            lengths = batch["lengths"].to(device)
            result = model.decode(features, lengths, backend=backend)
            for i in range(len(lengths)):
                L = int(lengths[i].item())
                pred = [0] * L
                # torch_semimarkov segments have an INCLUSIVE end (as in the script's evaluate)
                for seg in result.segments[i]:
                    for j in range(seg.start, min(seg.end + 1, L)):
                        pred[j] = seg.label
                out.append({"index": len(out), "utterance_id": batch["utterance_ids"][i],
                            "phones": [tp.PHONES_39[p] for p in pred]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-semimarkov", type=Path, required=True, help="torch-semimarkov checkout (benchmarking branch)")
    ap.add_argument("--data", type=Path, required=True, help="folder with train.jsonl and test.jsonl (workdir_to_jsonl.py)")
    ap.add_argument("--model", choices=["linear", "semicrf"], required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--crf-reg", type=float, default=0.001)
    ap.add_argument("--max-duration", type=int, default=30, help="K of the semi-CRF (linear uses 1)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--backend", default="streaming", help="the script's CRF backend (streaming, exact, ...)")
    ap.add_argument("--no-triton", action="store_true", help="use_triton=False (CPU runs; the GPU default uses Triton)")
    ap.add_argument("--out", type=Path, required=True, help="predictions JSONL to write")
    ap.add_argument("--status", type=Path, default=None, help="status JSON (default: OUT with .status.json)")
    a = ap.parse_args(argv)
    status_path = a.status or a.out.with_suffix(".status.json")
    for p in (a.data / "train.jsonl", a.data / "test.jsonl"):
        if not p.is_file():
            raise SystemExit(f"error: {p}: not found (write it with bench/accuracy/workdir_to_jsonl.py)")

    tp = import_old_script(a.torch_semimarkov)
    import torch
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    status: dict = {"program": "torch-semimarkov timit_phoneme.py", "model": a.model, "seed": a.seed,
                    "epochs": a.epochs, "hidden": a.hidden, "layers": a.layers, "batch": a.batch, "lr": a.lr,
                    "crf_reg": a.crf_reg, "max_duration": a.max_duration if a.model == "semicrf" else 1,
                    "device": device, "backend": a.backend, "use_triton": not a.no_triton}
    t0 = time.perf_counter()
    try:
        seed_everything(a.seed)
        model, metrics = tp.train_model(
            a.data, model_type=a.model, max_duration=a.max_duration, hidden_dim=a.hidden, num_layers=a.layers,
            batch_size=a.batch, learning_rate=a.lr, epochs=a.epochs, device=device, backend=a.backend,
            use_triton=not a.no_triton, log_every=a.epochs, crf_reg=a.crf_reg)
        status["train_seconds"] = time.perf_counter() - t0
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise FloatingPointError(f"non-finite parameters after training: {', '.join(bad[:5])}")
        status["script_metrics"] = jsonable(metrics.to_dict()) if metrics is not None else None
        if metrics is not None and not math.isfinite(float(metrics.phone_error_rate)):
            raise FloatingPointError(f"the script's PER is {metrics.phone_error_rate}")
        preds = decode_test(tp, model, a.data, a.batch, torch.device(device), a.backend)
        write_atomic(a.out, "".join(json.dumps(p, separators=(",", ":")) + "\n" for p in preds))
        status.update(ok=True, utterances=len(preds), seconds=time.perf_counter() - t0)
        write_atomic(status_path, json.dumps(status, indent=2) + "\n")
        print(f"ok: {a.model} seed {a.seed}: {len(preds)} test utterances -> {a.out}")
        return 0
    except Exception as e:  # a crash or a divergence is a result: record it
        status.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=8),
                      seconds=time.perf_counter() - t0)
        if a.out.exists():
            a.out.unlink()
        write_atomic(status_path, json.dumps(status, indent=2) + "\n")
        print(f"failed: {a.model} seed {a.seed}: {status['error']}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
