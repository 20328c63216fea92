#!/usr/bin/env python3
"""Train a PyTorch BiLSTM with timitseg's semi-CRF loss on a prepared WORKDIR
(`timitseg prepare`), printing the dev PER after every epoch.

    python3 examples/train_bilstm.py --workdir work/demo/prep --epochs 30

The model is the app's recipe (configs/synth.yaml's values are the defaults)
in PyTorch: CMVN'd features -> input Linear (dropout) -> BiLSTM (dropout
between layers) -> linear projection to the scoring classes (TIMIT's 39; on a
WORKDIR of prepare --corpus its phone set's, folded as the phone set says), and a second projection to onset scores (crf.onset_features) ->
timitseg.torch.SemiCRF (mean NLL per utterance + crf.reg's penalty; duration
bias initialised N(0, 0.1^2) + log p(d | label) of the train split, as
crf.duration_init: data; the CRF's parameters at crf.lr_scale x the lr), AdamW
with weight decay, gradient clipping and a cosine schedule per epoch. Decoding
is the CRF's Viterbi with crf.phone_bonus; the PER
is the Levenshtein distance between the decoded and the reference phone
sequences (runs of equal labels), summed over dev and divided by the number of
reference phones, as `timitseg evaluate` reports it. Needs torch and numpy.
"""
import argparse
import json
import os
import time

import numpy as np
import torch

from timitseg.checkpoint import read_safetensors
from timitseg.torch import SemiCRF


def scoring_classes(workdir):
    """The WORKDIR's frame labels -> scoring classes, and their number. TIMIT's WORKDIR
    (phones.json): the 61 labels folded onto the 39. Any other (prepare --corpus): the
    phone set the WORKDIR records (manifest.json's phone_set: its label table, and the
    fold of its phone_set.yaml, identity for labels without one)."""
    timit = os.path.join(workdir, "phones.json")
    if os.path.exists(timit):
        phones = json.load(open(timit))
        return np.array([max(m, 0) for m in phones["map61to39"]]), len(phones["phones39"])  # q never occurs
    manifest = os.path.join(workdir, "manifest.json")
    if not os.path.exists(manifest):
        raise SystemExit("%s: no manifest.json: not a prepared WORKDIR (timitseg prepare --timit TREE or "
                         "prepare --corpus PATH --out %s)" % (workdir, workdir))
    record = json.load(open(manifest)).get("phone_set")
    if not record:
        raise SystemExit("%s: manifest.json records no phone set and there is no phones.json" % manifest)
    spec = os.path.join(workdir, record.get("file", "phone_set.yaml"))
    fold = {}
    with open(spec, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml
        fold = (yaml.safe_load(text) or {}).get("fold") or {}
    except ImportError:
        if "\nfold:" in text:
            raise SystemExit("%s has a fold: reading it needs PyYAML (pip install pyyaml)" % spec)
    scoring, index = [], []
    for label in record["labels"]:
        target = fold.get(label, label)
        if target not in scoring:
            scoring.append(target)
        index.append(scoring.index(target))
    return np.array(index), len(scoring)


def load_split(workdir, split, map39):
    t = read_safetensors(os.path.join(workdir, split + ".safetensors"))
    off = t["utt_frame_offsets"]
    feats, labels = t["features"], map39[t["labels"]]
    return [(feats[off[u]:off[u + 1]], labels[off[u]:off[u + 1]]) for u in range(len(off) - 1)]


def runs(seq):
    out = []
    for v in seq:
        if not out or out[-1] != v:
            out.append(int(v))
    return out


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]


def duration_log_prior(labels, K, C):
    """log p(d | c), add-one smoothed, over the gold segmentation's pieces (runs split at K): [K][C]."""
    n = np.zeros((K, C))
    for y in labels:
        t = 0
        while t < len(y):
            r = t
            while r < len(y) and y[r] == y[t]:
                r += 1
            for u in range(t, r, K):
                n[min(K, r - u) - 1, y[t]] += 1
            t = r
    return np.log((n + 1) / (n.sum(0, keepdims=True) + K))


class Tagger(torch.nn.Module):
    """The app's model (model/params.h, docs/config.md "model"): an input Linear D -> W, dropout,
    a BiLSTM of W/2 units per direction with dropout between layers and none after the last,
    crf.projection W -> C (its bias held at its initial value, as the app holds it without
    crf.frame_ce_weight: its gradient is 0 in exact arithmetic) and crf.onset_projection W -> C.
    torch's default initialisations draw from the app's ranges (U(+-1/sqrt(fan_in)), U(+-1/sqrt(H)))."""

    def __init__(self, dim, hidden, layers, classes, a):
        super().__init__()
        self.inp = torch.nn.Linear(dim, hidden)
        self.drop = torch.nn.Dropout(a.dropout)
        self.lstm = torch.nn.LSTM(hidden, hidden // 2, layers, batch_first=True, bidirectional=True,
                                  dropout=a.dropout if layers > 1 else 0.0)
        self.proj = torch.nn.Linear(hidden, classes)
        self.proj.bias.requires_grad_(False)
        self.onset = torch.nn.Linear(hidden, classes) if a.onset else None
        self.crf = SemiCRF(classes, a.max_duration, backend=a.backend, reg=a.reg, phone_bonus=a.phone_bonus,
                           init_scale=0.1)

    def scores(self, x, lengths):
        x = self.drop(self.inp(x))
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        return self.proj(h), (self.onset(h) if self.onset is not None else None)


def batches(data, size, rng=None):
    order = np.arange(len(data)) if rng is None else rng.permutation(len(data))
    for i in range(0, len(order), size):
        items = [data[j] for j in order[i:i + size]]
        T = max(len(l) for _, l in items)
        x = np.zeros((len(items), T, items[0][0].shape[1]), dtype=np.float32)
        y = np.zeros((len(items), T), dtype=np.int64)
        for b, (f, l) in enumerate(items):
            x[b, :len(l)], y[b, :len(l)] = f, l
        yield torch.from_numpy(x), torch.tensor([len(l) for _, l in items]), torch.from_numpy(y)


def dev_per(model, dev, device):
    errors = total = 0
    model.eval()
    with torch.no_grad():
        for x, lengths, y in batches(dev, 32):
            s, o = model.scores(x.to(device), lengths.to(device))
            _, segs = model.crf.viterbi(s, lengths.to(device), onset=o)
            for b, seg in enumerate(segs):
                hyp = runs([int(r[2]) for r in seg.tolist() for _ in range(int(r[1]))])
                ref = runs(y[b, :lengths[b]].tolist())
                errors += edit_distance(hyp, ref)
                total += len(ref)
    model.train()
    return 100.0 * errors / max(total, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True,
                    help="a prepared WORKDIR (timitseg prepare --timit TREE, or prepare --corpus PATH)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128, help="model.hidden_dim (both directions)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.3)
    ap.add_argument("--max-duration", type=int, default=60, help="the CRF's K (crf.max_duration)")
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--lr-scale", type=float, default=30.0, help="crf.lr_scale: the CRF parameters' lr factor")
    ap.add_argument("--weight-decay", type=float, default=1e-5)
    ap.add_argument("--clip-norm", type=float, default=5.0)
    ap.add_argument("--reg", type=float, default=0.001, help="crf.reg")
    ap.add_argument("--phone-bonus", type=float, default=1.0, help="crf.phone_bonus (decoding)")
    ap.add_argument("--no-onset", dest="onset", action="store_false", help="no onset scores (crf.onset_features)")
    ap.add_argument("--no-duration-prior", dest="prior", action="store_false",
                    help="duration_bias ~ N(0, 0.1^2) only (crf.duration_init: random)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backend", default="auto", help="CRF backend: auto, cpu, cuda, reference")
    ap.add_argument("--metrics", help="write one JSON line per epoch (epoch, train_loss, dev_per as a fraction, "
                                      "as the app's metrics.jsonl) to this file")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    map39, C = scoring_classes(a.workdir)
    cmvn = read_safetensors(os.path.join(a.workdir, "cmvn.safetensors"))
    mean, std = cmvn["mean"], np.sqrt(np.maximum(cmvn["var"], 1e-10))
    norm = lambda d: [(((f - mean) / std).astype(np.float32), l) for f, l in d]  # noqa: E731
    train, dev = norm(load_split(a.workdir, "train", map39)), norm(load_split(a.workdir, "dev", map39))
    model = Tagger(train[0][0].shape[1], a.hidden, a.layers, C, a).to(a.device)
    if a.prior:
        with torch.no_grad():
            prior = duration_log_prior([l for _, l in train], a.max_duration, C)
            model.crf.duration_bias += torch.from_numpy(prior).float().to(a.device)
    crf_params = list(model.crf.parameters())
    others = [p for p in model.parameters() if p.requires_grad and all(p is not q for q in crf_params)]
    opt = torch.optim.AdamW([{"params": others}, {"params": crf_params, "lr": a.lr * a.lr_scale}], lr=a.lr,
                            weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs)
    print("train %d utterances, dev %d; CRF backend %s on %s" % (len(train), len(dev), model.crf.backend, a.device))
    best, lines = float("inf"), []
    for epoch in range(1, a.epochs + 1):
        t0, total = time.time(), 0.0
        for x, lengths, y in batches(train, a.batch_size, rng):
            x, lengths, y = x.to(a.device), lengths.to(a.device), y.to(a.device)
            s, o = model.scores(x, lengths)
            loss = model.crf(s, lengths, labels=y, onset=o, reduction="mean") + model.crf.penalty()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
            opt.step()
            total += float(loss.detach()) * len(lengths)
        sched.step()
        per = dev_per(model, dev, a.device)
        best = min(best, per)
        print("epoch %d: train loss %.4f, dev PER %.2f%% (best %.2f%%), %.1f s"
              % (epoch, total / len(train), per, best, time.time() - t0), flush=True)
        if a.metrics:  # one JSON line per epoch, the file replaced whole (never half-written)
            lines.append(json.dumps({"epoch": epoch, "train_loss": total / len(train), "dev_per": per / 100.0}))
            tmp = a.metrics + ".tmp"
            with open(tmp, "w") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(tmp, a.metrics)


if __name__ == "__main__":
    main()
