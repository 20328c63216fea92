#!/usr/bin/env python3
"""Train the encoder of examples/train_bilstm.py with torch.nn.CTCLoss on a
prepared WORKDIR's phone sequences, then force-align a split by Viterbi over
the CTC posteriors (the route of torchaudio's forced_align, MMS and WhisperX),
writing the phone spans as JSONL for `timitseg score --spans`.

    python3 examples/ctc_align.py --workdir W --epochs 30 --split core-test --out spans.jsonl
    timitseg score --spans spans.jsonl --workdir W --split core-test

The encoder is train_bilstm.py's (CMVN'd features -> input Linear, dropout ->
BiLSTM with dropout between layers -> a linear projection), its projection to
the scoring classes plus one, the CTC blank (the last class). The optimiser
and schedule are train_bilstm.py's too (AdamW, gradient clipping, cosine per
epoch). Targets: a timed utterance's phone sequence is the runs of its frame
labels in the scoring set, silences (h#, pau, ...) kept as phones; a
transcript-only utterance's is its transcript with the optional phones (the
silences prepare offers between words) left out and the obligatory ones kept.
Both are the sequences the loss sees; the timings never are.

Forced alignment of an utterance: its known phone sequence y_1..y_N (the runs
of its frame labels, the sequence `evaluate --align` aligns), the standard CTC
trellis over the 2N+1 states (blank, y_1, blank, ..., y_N, blank), the best
path by Viterbi over the log-posteriors (a state moves to itself, the next
one, or skips a blank between two different phones; the path ends in the last
phone or the last blank). Phone spans from the path, as torchaudio's
merge_tokens gives each token's frames and the usual boundary convention
closes them: phone n starts at its first emitting frame and ends where phone
n+1 starts (the blanks between them are its own), the first phone starts at
frame 0 and the last ends at the last frame. A frame boundary f is the sample
halfway between the centres of frames f-1 and f (as timitseg's alignments
place it), written in seconds. Where the .PHN beside an utterance's audio has
another phone sequence (a phone shorter than a frame vanishes from the frame
labels), that sequence is aligned too and written as "phn_phones" (what
`evaluate --align` does: it aligns the .PHN's sequence again for the
sample-accurate figures). Needs torch and numpy.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bilstm import batches, runs, scoring_classes  # noqa: E402  (the same data and helpers)


def phn_sequence(audio, phones, fold):
    """The scoring classes of the .PHN beside `audio` (q and other unmapped labels into the phone
    before, equal neighbours merged, as `timitseg evaluate --align` reads it), or None without one."""
    for ext in (".PHN", ".phn"):
        path = os.path.splitext(audio)[0] + ext
        if os.path.exists(path):
            break
    else:
        return None
    index = {p: i for i, p in enumerate(phones["phones61"])}
    out = []
    for line in open(path):
        f = line.split()
        if len(f) != 3 or f[2] not in index or phones["map61to39"][index[f[2]]] < 0:
            continue
        c = phones["map61to39"][index[f[2]]]
        if not out or out[-1] != c:
            out.append(c)
    return out


def read_split(workdir, split, fold):
    """(the utterances' metadata {id, audio, ...}, [(features [T][D], scoring labels [T] or None, target phone sequence)]) of a split."""
    path = os.path.join(workdir, split + ".safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        types = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "U8": np.uint8}
        t = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            t[name] = np.frombuffer(f.read(b - a), dtype=types[info["dtype"]]).reshape(info["shape"])
    meta = json.loads(header["__metadata__"]["utterances"])
    off = t["utt_frame_offsets"]
    out = []
    for u in range(len(off) - 1):
        x, raw = t["features"][off[u]:off[u + 1]], t["labels"][off[u]:off[u + 1]]
        if meta[u].get("times", True):
            y = fold[raw]
            out.append((x, y, runs(y)))
        else:  # a transcript only: its obligatory phones
            a, b = t["utt_transcript_offsets"][u], t["utt_transcript_offsets"][u + 1]
            keep = t["transcript_optional"][a:b] == 0
            out.append((x, None, runs(fold[t["transcripts"][a:b][keep]])))
    return meta, out


class Encoder(torch.nn.Module):
    """train_bilstm.py's Tagger without its CRF: input Linear D -> W, dropout, BiLSTM (W/2 per
    direction, dropout between layers), projection W -> classes + 1 (the blank last)."""

    def __init__(self, dim, hidden, layers, classes, dropout):
        super().__init__()
        self.inp = torch.nn.Linear(dim, hidden)
        self.drop = torch.nn.Dropout(dropout)
        self.lstm = torch.nn.LSTM(hidden, hidden // 2, layers, batch_first=True, bidirectional=True,
                                  dropout=dropout if layers > 1 else 0.0)
        self.proj = torch.nn.Linear(hidden, classes + 1)

    def forward(self, x, lengths):
        """log-posteriors [B][T][classes + 1]."""
        x = self.drop(self.inp(x))
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        return torch.log_softmax(self.proj(h), dim=-1)


def ctc_forced_align(logp, phones, blank):
    """Viterbi over the CTC trellis. logp [T][C+1] log-posteriors, phones [N] (N >= 1).
    Returns (path [T] of states in 0..2N, each state s: blank when s is even, else phone (s-1)/2;
    its log-probability). Raises ValueError when no path exists (T < N + repeats)."""
    T, N = logp.shape[0], len(phones)
    S = 2 * N + 1
    z = np.full(S, blank)
    z[1::2] = phones
    skip = np.zeros(S, dtype=bool)  # s may be entered from s - 2: a phone after a blank, unlike the phone before it
    skip[3::2] = np.asarray(phones[1:]) != np.asarray(phones[:-1])
    alpha = np.full(S, -np.inf)
    alpha[0] = logp[0, blank]
    alpha[1] = logp[0, z[1]]
    back = np.zeros((T, S), dtype=np.int8)  # 0: from s, 1: from s - 1, 2: from s - 2
    for t in range(1, T):
        stay = alpha
        step = np.concatenate(([-np.inf], alpha[:-1]))
        jump = np.where(skip, np.concatenate(([-np.inf, -np.inf], alpha[:-2])), -np.inf)
        cand = np.stack([stay, step, jump])  # [3][S], ties to the earliest (stay, then step)
        back[t] = np.argmax(cand, axis=0)
        alpha = cand[back[t], np.arange(S)] + logp[t, z]
    end = S - 1 if S == 1 or alpha[S - 1] >= alpha[S - 2] else S - 2
    if not np.isfinite(alpha[end]):
        raise ValueError("no CTC path: %d frames cannot hold %d phones" % (T, N))
    path = np.zeros(T, dtype=np.int64)
    path[T - 1] = end
    for t in range(T - 1, 0, -1):
        path[t - 1] = path[t] - back[t, path[t]]
    return path, float(alpha[end])


def path_to_spans(path, num_phones):
    """Frame spans [(start, end)] of the phones: phone n from its first emitting frame to phone
    n+1's first (the first phone from 0, the last to T)."""
    first = [None] * num_phones
    for t, s in enumerate(path):
        if s % 2 == 1 and first[(s - 1) // 2] is None:
            first[(s - 1) // 2] = t
    starts = [0] + first[1:]
    return [(starts[n], starts[n + 1] if n + 1 < num_phones else len(path)) for n in range(num_phones)]


def boundary_seconds(frame, fo):
    """The sample halfway between the centres of frames f-1 and f (0 at f = 0), in seconds."""
    rate = fo["sample_rate"]
    shift, length = int(rate * 0.001 * fo["frame_shift_ms"]), int(rate * 0.001 * fo["frame_length_ms"])
    centre = lambda t: t * shift + (length // 2 if fo.get("snip_edges", True) else shift // 2)  # noqa: E731
    return 0.0 if frame <= 0 else ((centre(frame - 1) + centre(frame)) // 2) / rate


def train(model, data, a, blank, device):
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs)
    ctc = torch.nn.CTCLoss(blank=blank, reduction="mean", zero_infinity=True)
    rng = np.random.default_rng(a.seed)
    for epoch in range(1, a.epochs + 1):
        t0, total = time.time(), 0.0
        order = rng.permutation(len(data))
        for i in range(0, len(order), a.batch_size):
            part = [data[j] for j in order[i:i + a.batch_size]]
            # batches() pads the features; the frame labels are not used (zeros)
            x, lengths, _ = next(batches([(f, np.zeros(len(f), dtype=np.int64)) for f, _, _ in part], len(part)))
            targets = torch.tensor([p for _, _, q in part for p in q], dtype=torch.long, device=device)
            target_lengths = torch.tensor([len(q) for _, _, q in part])
            logp = model(x.to(device), lengths)  # [B][T][C+1]
            loss = ctc(logp.transpose(0, 1), targets, lengths, target_lengths)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
            opt.step()
            total += float(loss.detach()) * len(part)
        sched.step()
        print("epoch %d: CTC loss %.4f, %.1f s" % (epoch, total / len(data), time.time() - t0), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True, help="a prepared WORKDIR (timitseg prepare)")
    ap.add_argument("--split", default="core-test", help="the split to align (dev, core-test, test)")
    ap.add_argument("--out", required=True, help="the spans JSONL to write (timitseg score --spans reads it)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128, help="model.hidden_dim (both directions)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.3)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--weight-decay", type=float, default=1e-5)
    ap.add_argument("--clip-norm", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu",
                    help="where the encoder trains and runs (auto: cuda when torch sees a GPU); the forced "
                         "alignment (Viterbi) is numpy on the CPU either way")
    a = ap.parse_args()
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU (torch.cuda.is_available() is False)")
    device = torch.device(a.device)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    fold, C = scoring_classes(a.workdir)
    names = json.load(open(os.path.join(a.workdir, "phones.json")))["phones39"] \
        if os.path.exists(os.path.join(a.workdir, "phones.json")) else None
    if names is None:
        raise SystemExit("%s: ctc_align.py reads TIMIT-style WORKDIRs (phones.json) for the label names" % a.workdir)
    fo = json.load(open(os.path.join(a.workdir, "manifest.json")))["feature_options"]
    from timitseg.checkpoint import read_safetensors
    cmvn = read_safetensors(os.path.join(a.workdir, "cmvn.safetensors"))
    mean, std = cmvn["mean"], np.sqrt(np.maximum(cmvn["var"], 1e-10))
    norm = lambda d: [(((x - mean) / std).astype(np.float32), y, q) for x, y, q in d]  # noqa: E731
    _, train_data = read_split(a.workdir, "train", fold)
    train_data = [d for d in norm(train_data) if len(d[2]) > 0]
    meta, test = read_split(a.workdir, a.split, fold)
    phones_json = json.load(open(os.path.join(a.workdir, "phones.json")))
    test = norm(test)
    model = Encoder(train_data[0][0].shape[1], a.hidden, a.layers, C, a.dropout).to(device)
    print("train %d utterances, align %d of %s; %d classes + blank; on %s" % (len(train_data), len(test), a.split, C,
                                                                             device))
    model.train()
    train(model, train_data, a, blank=C, device=device)
    model.eval()
    lines, failed = [], 0
    with torch.no_grad():
        for m, (x, _, q) in zip(meta, test):
            logp = model(torch.from_numpy(x)[None].to(device), torch.tensor([len(x)]))[0].cpu().numpy().astype(np.float64)
            phn = phn_sequence(m["audio"], phones_json, fold)
            line = {"utterance_id": m["id"]}
            try:
                for key, seq in (("phones", q), ("phn_phones", phn if phn and phn != q else None)):
                    if seq is None:
                        continue
                    path, _ = ctc_forced_align(logp, seq, C)
                    spans = path_to_spans(path, len(seq))
                    line[key] = [[boundary_seconds(s, fo), boundary_seconds(e, fo), names[c]]
                                 for (s, e), c in zip(spans, seq)]
            except ValueError as e:
                failed += 1
                print("%s: %s" % (m["id"], e), file=sys.stderr)
                continue
            lines.append(json.dumps(line))
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, a.out)
    print("wrote %s: %d utterances aligned, %d without a path" % (a.out, len(lines), failed))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
