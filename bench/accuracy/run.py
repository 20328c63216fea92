#!/usr/bin/env python3
"""Side-by-side accuracy of timitseg and the reference script over several seeds.

For every (program, variant, seed) it trains on WORKDIR's train split, takes
the LAST epoch's model, writes its frame predictions on core-test and scores
them with `timitseg score`, so both programs are scored by one implementation
on identical features and labels (bench/accuracy/workdir_to_jsonl.py writes the
reference script's JSONL from the same WORKDIR). It prints mean +- standard
deviation over the seeds (sample std, n-1) of PER, boundary F1 at 0/1/2 frames,
segment F1, duration KL and boundary precision, recall, F1 and R-value at 20 ms
(P@20ms, R@20ms, F1@20ms, R-val@20ms), and the failed runs; writes OUT/results.json and
OUT/results.md (a markdown table for docs/training.md). --phone-bonus-sweep
then decodes every timitseg run's last model with several crf.phone_bonus
values (no training) and selects one on dev by a fixed rule (OUT/SIZE/sweep.md,
OUT/sweep-joint.json).

  timitseg runs       train (configs/synth.yaml + the size's keys + the
                      variant's --set), evaluate --dump-predictions, score;
                      --jobs of them at once (on the CPU with train.threads 2)
  reference runs      bench/accuracy/old_script_run.py, one at a time on the
                      GPU (--old-jobs), concurrently with the timitseg runs;
                      only with --torch-semimarkov

Robust: a failing run (crash, NaN, timeout) is recorded in its folder
(failed.json, log.txt) and the others go on; re-running the same command skips
finished runs (score.json present) and recorded failures (--retry-failed runs
them again). docs/training.md, "Accuracy against the reference script".
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from accuracy_io import write_atomic  # this folder (the scripts run as files: it is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

SIZES = {
    # the demo recipe: 2 x 128 BiLSTM, batch 8, lr 0.005 cosine, crf-reg 0.001, 20 epochs, dropout 0.3
    "demo": dict(hidden=128, layers=2, batch=8, lr=0.005, crf_reg=0.001, epochs=20, dropout=0.3),
    # the recipe size: 3 x 256, batch 32, otherwise the same
    "recipe": dict(hidden=256, layers=3, batch=32, lr=0.005, crf_reg=0.001, epochs=20, dropout=0.3),
}
K_SEMI = 30  # the reference script's --max-duration default (the matched variants)


def _shipped_k() -> int:
    """crf.max_duration of configs/synth.yaml: the semi-CRF's K of the shipped variants."""
    import re
    text = (Path(__file__).resolve().parents[2] / "configs" / "synth.yaml").read_text()
    m = re.search(r"^crf:\n(?:  .*\n)*?  max_duration: (\d+)", text, re.M)
    if not m:
        raise SystemExit("error: configs/synth.yaml: no crf.max_duration")
    return int(m.group(1))


K_SHIPPED = _shipped_k()

# The reference script's settings as timitseg keys: its dropout rate (after the
# input Linear and between LSTM layers, as timitseg places it), an unbucketed
# shuffle, CosineAnnealingLR stepped per epoch, transition/duration_bias ~
# N(0, 0.1^2) trained at the encoder's learning rate. (Not matched: it centres
# scores over the padded T.)
MATCHED = "--set model.dropout={dropout} --set train.bucketing=false --set train.lr_schedule=cosine_epoch " \
          "--set crf.init_scale=0.1 --set crf.lr_scale=1 --set crf.duration_init=random --set crf.phone_bonus=0"
DEFAULT_VARIANTS = {
    "timitseg-linear-shipped": "--set crf.max_duration=1",
    "timitseg-semicrf-shipped": f"--set crf.max_duration={K_SHIPPED}",
    "timitseg-linear-matched": "--set crf.max_duration=1 " + MATCHED,
    "timitseg-semicrf-matched": f"--set crf.max_duration={K_SEMI} " + MATCHED,
}
# One factor at a time, from the shipped configs (configs/synth.yaml) back to
# the script's setting, or to the trade-off offered for GPU speed (--preset ablation).
ABLATION_VARIANTS = {}
for _crf, _k in (("linear", 1), ("semicrf", K_SHIPPED)):
    _base = f"--set crf.max_duration={_k}"
    ABLATION_VARIANTS[f"{_crf}-shipped"] = _base
    ABLATION_VARIANTS[f"{_crf}-shipped-lr-scale1"] = _base + " --set crf.lr_scale=1"
    if _k > 1:  # with K = 1 the duration prior is log 1 = 0
        ABLATION_VARIANTS[f"{_crf}-shipped-duration-random"] = _base + " --set crf.duration_init=random"
    ABLATION_VARIANTS[f"{_crf}-shipped-bucketing"] = _base + " --set train.bucketing=true"
    ABLATION_VARIANTS[f"{_crf}-shipped-phone-bonus0"] = _base + " --set crf.phone_bonus=0"
# One factor at a time from the matched settings (the first ablation, before
# crf.lr_scale and crf.duration_init existed; --preset ablation-matched).
MATCHED_ABLATION_VARIANTS = {}
for _crf, _k in (("linear", 1), ("semicrf", K_SEMI)):
    _base = f"--set crf.max_duration={_k} " + MATCHED
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched"] = _base
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-dropout0.2"] = _base + " --set model.dropout=0.2"
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-bucketing"] = _base + " --set train.bucketing=true"
    # the trade-off: length-sorted pools of only 4 batches (less padding, most of the shuffle kept)
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-bucketing4"] = \
        _base + " --set train.bucketing=true --set train.bucket_batches=4"
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-cosine-per-update"] = _base + " --set train.lr_schedule=cosine"
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-init-zero"] = _base + " --set crf.init_scale=0"
    MATCHED_ABLATION_VARIANTS[f"{_crf}-matched-frame-normalized"] = _base + " --set crf.loss_normalization=frame"
PRESETS = {"main": DEFAULT_VARIANTS, "ablation": ABLATION_VARIANTS, "ablation-matched": MATCHED_ABLATION_VARIANTS,
           # both ablations in one run (their "-shipped" and "-matched" are main's variants)
           "all": {**ABLATION_VARIANTS, **MATCHED_ABLATION_VARIANTS}}
METRICS = [  # (key in results, header, scale, digits)
    ("per", "PER %", 100, 2),
    ("boundary_f1_0", "boundary F1 tol 0", 100, 1),
    ("boundary_f1_1", "boundary F1 tol 1", 100, 1),
    ("boundary_f1_2", "boundary F1 tol 2", 100, 1),
    ("segment_f1", "segment F1", 100, 1),
    ("duration_kl", "duration KL", 1, 3),
    # the field's segmentation metrics (evaluate/score JSON "boundary_20ms";
    # docs/training.md "Boundary metrics at 20 ms")
    ("precision_20ms", "P@20ms", 100, 1),
    ("recall_20ms", "R@20ms", 100, 1),
    ("f1_20ms", "F1@20ms", 100, 1),
    ("r_value_20ms", "R-val@20ms", 100, 1),
]

print_lock = threading.Lock()


def say(msg: str) -> None:
    with print_lock:
        print(time.strftime("[%H:%M:%S] ") + msg, flush=True)


class RunFailed(Exception):
    pass


class Interrupted(Exception):
    """--max-minutes reached: the run is left for the next invocation (not a failure)."""


DEADLINE = [float("inf")]  # time.time() after which running commands are stopped (--max-minutes)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's own process group (timitseg train stops between steps), SIGKILL after 60 s."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


def sh(cmd: list[str], log: Path, timeout: float | None) -> None:
    """Runs cmd, appending its output to log; RunFailed with the log's tail on a non-zero exit or
    after timeout seconds, Interrupted at the --max-minutes deadline."""
    t0 = time.time()
    with open(log, "a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            raise RunFailed(f"cannot run {cmd[0]}: {e.strerror}")
        try:
            while True:
                try:
                    rc = proc.wait(timeout=2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.time() > DEADLINE[0]:
                    stop(proc)
                    raise Interrupted("stopped (--max-minutes deadline or an interrupt)")
                if timeout and time.time() - t0 > timeout:
                    stop(proc)
                    raise RunFailed(f"timed out after {timeout:.0f} s: {shlex.join(cmd[:3])} ...")
        except BaseException:
            if proc.poll() is None:
                stop(proc)
            raise
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-8:]
        errs = [l for l in tail if "error" in l.lower() or "nan" in l.lower()] or tail[-1:] or [""]
        sub = next((Path(c).name for c in cmd if c in ("train", "evaluate", "score") or c.endswith(".py")), cmd[0])
        raise RunFailed(f"{sub} exit {rc}: {errs[-1].strip()[:200]}\n" + "\n".join(tail))


def scores_of(score_json: Path) -> dict:
    j = json.loads(score_json.read_text())
    bf = j["boundary_f1"]
    r = {"per": j["per"], "boundary_f1_0": bf["0"], "boundary_f1_1": bf["1"], "boundary_f1_2": bf["2"],
         "segment_f1": j["segment_f1"], "duration_kl": j["duration_kl"], "frame_accuracy": j["frame_accuracy"],
         "utterances": j["utterances"]}
    b20 = j.get("boundary_20ms")  # absent from the score.json of a binary older than the 20 ms metrics
    if b20:
        r.update({"precision_20ms": b20["precision"], "recall_20ms": b20["recall"], "f1_20ms": b20["f1"],
                  "r_value_20ms": b20["r_value"]})
    return r


class Driver:
    """The runs of one size, in OUT/SIZE."""

    def __init__(self, a, size_name: str):
        self.a = a
        self.ts = shlex.split(a.timitseg)
        self.size_name = size_name
        self.size = dict(SIZES[size_name])
        if a.epochs:
            self.size["epochs"] = a.epochs
        self.out = a.out.resolve() / size_name
        self.workdir = str(Path(a.workdir).resolve())

    # ---- one run ------------------------------------------------------------
    def run_dir(self, variant: str, seed: int) -> Path:
        return self.out / "runs" / variant / f"seed-{seed}"

    def guarded(self, variant: str, seed: int, body, resumable: bool = False) -> dict:
        d = self.run_dir(variant, seed)
        done, failed = d / "score.json", d / "failed.json"
        rec = {"variant": variant, "seed": seed, "dir": str(d)}
        if done.exists():
            say(f"{variant} seed {seed}: finished before, skipped")
            return self.with_script_per({**rec, "ok": True, **scores_of(done)}, d, quiet=True)
        if failed.exists() and not self.a.retry_failed:
            say(f"{variant} seed {seed}: failed before, skipped (--retry-failed runs it again)")
            return {**rec, "ok": False, "error": json.loads(failed.read_text())["error"]}
        if time.time() > DEADLINE[0]:
            return {**rec, "ok": False, "pending": True, "error": "not started before the --max-minutes deadline"}
        if d.exists() and not resumable:
            shutil.rmtree(d)  # an unfinished or failed attempt: start over
        if failed.exists():
            failed.unlink()
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        say(f"{variant} seed {seed}: started")
        try:
            body(d, seed)
            r = {**rec, "ok": True, **scores_of(done), "seconds": time.time() - t0}
            say(f"{variant} seed {seed}: PER {100 * r['per']:.2f} %, boundary F1 {100 * r['boundary_f1_0']:.1f}, "
                f"segment F1 {100 * r['segment_f1']:.1f} ({r['seconds']:.0f} s)")
            return self.with_script_per(r, d)
        except Interrupted as e:
            say(f"{variant} seed {seed}: {e}; the next invocation goes on with it")
            return {**rec, "ok": False, "pending": True, "error": str(e)}
        except Exception as e:  # a failing run is a result; the others go on
            err = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
            write_atomic(failed, json.dumps({"error": err, "seconds": time.time() - t0}, indent=2) + "\n")
            say(f"{variant} seed {seed}: FAILED: {err.splitlines()[0]} (log: {d / 'log.txt'})")
            return {**rec, "ok": False, "error": err}

    @staticmethod
    def with_script_per(r: dict, d: Path, quiet: bool = False) -> dict:
        """Adds the reference script's own PER of the same model (status.json), a sanity check of the scoring."""
        st = d / "status.json"
        if st.exists():
            sm = json.loads(st.read_text()).get("script_metrics") or {}
            if isinstance(sm.get("phone_error_rate"), (int, float)):
                r["script_per"] = sm["phone_error_rate"]
                if abs(r["script_per"] - r["per"]) > 1e-9 and not quiet:
                    say(f"{r['variant']} seed {r['seed']}: note: the script's own PER {100 * r['script_per']:.3f} % "
                        f"differs from timitseg score's {100 * r['per']:.3f} %")
        return r

    def score(self, d: Path, pred: Path) -> None:
        sh(self.ts + ["score", "--workdir", self.workdir, "--split", self.a.split, "--predictions", str(pred),
                      "--json", str(d / "score.json")], d / "log.txt", 600)

    def timitseg_body(self, variant_args: list[str]):
        def body(d: Path, seed: int) -> None:
            s = self.size
            run_dir = d / "run"
            ckpt = run_dir / "checkpoints" / f"epoch-{s['epochs']}.safetensors"
            cmd = self.ts + ["train", "--config", str(self.a.config),
                             "--set", f"data.workdir={self.workdir}", "--set", f"train.run_dir={run_dir}",
                             "--set", f"train.seed={seed}", "--set", f"train.epochs={s['epochs']}",
                             "--set", f"model.hidden_dim={s['hidden']}", "--set", f"model.num_layers={s['layers']}",
                             "--set", f"train.batch_size={s['batch']}", "--set", f"train.lr={s['lr']}",
                             "--set", f"crf.reg={s['crf_reg']}"]
            cmd += [x.format(**s) for x in variant_args]
            cmd += ["--set", f"train.device={self.a.device}"]
            if self.a.device == "cpu":
                cmd += ["--set", f"train.threads={self.a.threads}", "--set", "crf.backend=cpu"]
            else:
                cmd += ["--set", "crf.backend=cuda"]
            if ckpt.exists():
                pass  # trained by an earlier invocation; evaluate and score below
            elif any((run_dir / "checkpoints").glob("epoch-*.safetensors")):
                # stopped by --max-minutes (or a crash) after some epochs: go on from the last one
                sh(self.ts + ["train", "--resume", str(run_dir), "--set", f"train.device={self.a.device}"] +
                   (["--set", f"train.threads={self.a.threads}"] if self.a.device == "cpu" else []),
                   d / "log.txt", self.a.timeout)
            else:
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # stopped within its first epoch: nothing to resume
                sh(cmd, d / "log.txt", self.a.timeout)
            if not ckpt.exists():
                raise RunFailed(f"{ckpt}: not written (see {d / 'log.txt'})")
            pred = d / "predictions.jsonl"
            sh(self.ts + ["evaluate", "--checkpoint", str(ckpt), "--split", self.a.split, "--workdir", self.workdir,
                          "--device", self.a.device, "--threads", str(self.a.threads), "--json",
                          str(d / "evaluate.json"), "--dump-predictions", str(pred)], d / "log.txt", 1200)
            self.score(d, pred)
        return body

    def old_body(self, model: str, jsonl: Path):
        def body(d: Path, seed: int) -> None:
            s = self.size
            pred = d / "predictions.jsonl"
            cmd = [self.a.python, str(HERE / "old_script_run.py"), "--torch-semimarkov", str(self.a.torch_semimarkov),
                   "--data", str(jsonl), "--model", model, "--seed", str(seed), "--epochs", str(s["epochs"]),
                   "--hidden", str(s["hidden"]), "--layers", str(s["layers"]), "--batch", str(s["batch"]),
                   "--lr", str(s["lr"]), "--crf-reg", str(s["crf_reg"]), "--max-duration", str(K_SEMI),
                   "--out", str(pred), "--status", str(d / "status.json")]
            if self.a.old_device:
                cmd += ["--device", self.a.old_device]
            if self.a.old_no_triton:
                cmd += ["--no-triton"]
            if self.a.old_backend:
                cmd += ["--backend", self.a.old_backend]
            try:
                sh(cmd, d / "log.txt", self.a.timeout)
            except RunFailed as e:
                st = d / "status.json"
                if st.exists() and not json.loads(st.read_text()).get("ok", False):
                    raise RunFailed(json.loads(st.read_text())["error"]) from e
                raise
            self.score(d, pred)
        return body

    def sweep(self, rec: dict, split: str, bonus: float) -> dict:
        """--phone-bonus-sweep: the run's last checkpoint decoded on SPLIT with crf.phone_bonus BONUS (training
        does not depend on it, so one trained model serves every bonus)."""
        d = Path(rec["dir"])
        ckpt = d / "run" / "checkpoints" / f"epoch-{self.size['epochs']}.safetensors"
        j = d / "sweep" / f"{split}-bonus-{bonus:g}.json"
        if not j.exists():
            j.parent.mkdir(parents=True, exist_ok=True)
            sh(self.ts + ["evaluate", "--checkpoint", str(ckpt), "--split", split, "--workdir", self.workdir,
                          "--device", self.a.device, "--threads", str(self.a.threads), "--phone-bonus", f"{bonus:g}",
                          "--json", str(j)], d / "sweep" / "log.txt", 1200)
        return {"variant": rec["variant"], "seed": rec["seed"], "split": split, "bonus": bonus, "ok": True,
                **scores_of(j)}

    def finish_sweep(self, results: list[dict]) -> None:
        """Writes sweep.json and sweep.md: per variant and bonus, mean ± std over seeds on each sweep split, and
        the bonus selected on the first sweep split by SWEEP_RULE."""
        a = self.a
        splits = a.sweep_splits.split(",")
        rows, chosen = [], {}
        for v in self.variants:
            for b in a.bonuses:
                row = {"variant": v, "bonus": b}
                for sp in splits:
                    rs = [r for r in results if r["variant"] == v and r["bonus"] == b and r["split"] == sp]
                    row[sp] = summarize(rs, [v])[0] if rs else None
                rows.append(row)
            chosen[v] = select_bonus([r for r in rows if r["variant"] == v], splits[0])
        write_atomic(self.out / "sweep.json", json.dumps({"rule": SWEEP_RULE, "selected": chosen, "rows": rows,
                                                          "runs": results}, indent=2) + "\n")
        md = sweep_markdown(rows, chosen, splits, self.size_name, a)
        write_atomic(self.out / "sweep.md", md)
        print()
        print(md)

    # ---- the whole comparison -------------------------------------------------
    def prepare_jsonl(self) -> Path:
        jsonl = self.a.out.resolve() / "jsonl"  # shared by the sizes
        stamp = jsonl / "source.json"
        want = {"workdir": self.workdir, "split": self.a.split,
                "manifest_mtime": os.path.getmtime(Path(self.workdir) / "manifest.json")}
        if stamp.exists() and json.loads(stamp.read_text()) == want:
            return jsonl
        say(f"writing the reference script's JSONL into {jsonl}")
        subprocess.run([self.a.python, str(HERE / "workdir_to_jsonl.py"), "--workdir", self.workdir,
                        "--torch-semimarkov", str(self.a.torch_semimarkov), "--out", str(jsonl),
                        "--split", "train=train", "--split", f"{self.a.split}=test"], check=True)
        write_atomic(stamp, json.dumps(want) + "\n")
        return jsonl

    def jobs(self) -> tuple[list, list]:
        """(reference jobs, timitseg jobs): callables that return one run's record."""
        a = self.a
        self.out.mkdir(parents=True, exist_ok=True)
        variants = (PRESETS[a.preset] if not a.variant else dict(parse_variant(v) for v in a.variant))
        if a.only:
            names = [x.strip() for x in a.only.split(",") if x.strip()]
            unknown = [n for n in names if n not in variants]
            if unknown:
                raise SystemExit(f"--only: no variant {', '.join(unknown)} (have: {', '.join(variants)})")
            variants = {n: variants[n] for n in names}
        if a.extra:
            variants = {n: v + " " + a.extra for n, v in variants.items()}
        self.variants = variants
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
        ts_jobs = [lambda n=name, sd=seed, b=self.timitseg_body(shlex.split(args)): self.guarded(n, sd, b, True)
                   for name, args in variants.items() for seed in seeds]
        old_jobs = []
        if a.torch_semimarkov:
            jsonl = self.prepare_jsonl()
            old_jobs = [lambda n=f"old-{m}", sd=seed, b=self.old_body(m, jsonl): self.guarded(n, sd, b)
                        for m in a.old_models.split(",") for seed in seeds]
        plan = {"workdir": self.workdir, "split": a.split, "size": self.size_name, "hyper": self.size, "seeds": seeds,
                "config": str(a.config), "timitseg": a.timitseg, "device": a.device,
                "variants": variants, "old_models": a.old_models if a.torch_semimarkov else None,
                "torch_semimarkov": str(a.torch_semimarkov) if a.torch_semimarkov else None}
        old_plan_path = self.out / "plan.json"
        if old_plan_path.exists():
            # finished runs are reused by name: refuse to mix runs of other settings
            old_plan = json.loads(old_plan_path.read_text())
            for key in ("workdir", "split", "hyper", "config"):
                if old_plan.get(key) != plan[key]:
                    raise SystemExit(f"error: {self.out} holds runs with {key} = {old_plan.get(key)}, this call has "
                                     f"{plan[key]}; use another --out")
            for name, args in variants.items():
                if old_plan.get("variants", {}).get(name, args) != args:
                    raise SystemExit(f"error: {self.out}: variant {name} was run with '{old_plan['variants'][name]}', "
                                     f"this call has '{args}'; rename the variant or use another --out")
            plan["variants"] = {**old_plan.get("variants", {}), **variants}
        write_atomic(old_plan_path, json.dumps(plan, indent=2) + "\n")
        return old_jobs, ts_jobs

    def finish(self, results: list[dict]) -> int:
        """Writes results.json and results.md of this size; returns the number of pending runs."""
        a = self.a
        order = [f"old-{m}" for m in (a.old_models.split(",") if a.torch_semimarkov else [])] + list(self.variants)
        table = summarize(results, order)
        write_atomic(self.out / "results.json", json.dumps(
            {"plan": json.loads((self.out / "plan.json").read_text()), "summary": table,
             "runs": sorted(results, key=lambda r: (order.index(r["variant"]), r["seed"]))}, indent=2) + "\n")
        md = markdown(table, self.size_name, self.size, a)
        write_atomic(self.out / "results.md", md)
        print()
        print(md)
        pending = sum(1 for r in results if r.get("pending"))
        failed = sum(1 for r in results if not r["ok"]) - pending
        print(f"{self.size_name}: {len(results) - failed - pending} runs finished, {failed} failed, {pending} "
              f"pending; {self.out / 'results.json'}, {self.out / 'results.md'}")
        return pending


def run_all(a) -> int:
    drivers = [Driver(a, name) for name in a.size.split(",")]
    per_driver: list[list[dict]] = [[] for _ in drivers]
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool, cf.ThreadPoolExecutor(max_workers=a.old_jobs) as gpu:
        futs = {}
        # timitseg runs first in the queue of the CPU pool; the reference runs queue on the GPU worker
        all_jobs = [(i, d.jobs()) for i, d in enumerate(drivers)]
        for i, (old_jobs, _) in all_jobs:
            futs.update({gpu.submit(j): i for j in old_jobs})
        for i, (_, ts_jobs) in all_jobs:
            futs.update({pool.submit(j): i for j in ts_jobs})
        try:
            for f in cf.as_completed(futs):
                per_driver[futs[f]].append(f.result())
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM: the workers stop their commands within seconds (as at
            # the --max-minutes deadline); what finished is summarized as usual
            say("interrupted: stopping the running commands")
            DEADLINE[0] = 0.0
            done = {id(r) for rs in per_driver for r in rs}
            for f, i in futs.items():
                r = f.result()
                if id(r) not in done:
                    per_driver[i].append(r)
    pending = sum(d.finish(r) for d, r in zip(drivers, per_driver))
    if a.bonuses and not pending:
        # the phone-bonus sweep of every finished timitseg run (decoding only: no training)
        sweeps: list[list[dict]] = [[] for _ in drivers]
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            futs = {pool.submit(d.sweep, r, sp, b): i for i, (d, rs) in enumerate(zip(drivers, per_driver))
                    for r in rs if r["ok"] and not r["variant"].startswith("old-")
                    for sp in a.sweep_splits.split(",") for b in a.bonuses}
            for f in cf.as_completed(futs):
                sweeps[futs[f]].append(f.result())
        for d, rs in zip(drivers, sweeps):
            d.finish_sweep(rs)
        joint_selection(a.out)
    if pending:
        print("some runs were stopped (--max-minutes or an interrupt) or not started: run the same command again to finish them")
        return 4
    return 0


def make_synth(a) -> None:
    parts = a.synth.split(",")
    if len(parts) not in (2, 3) or not all(x.strip().isdigit() for x in parts):
        raise SystemExit(f"error: --synth {a.synth}: expected SPEAKERS,UTTERANCES[,SEED], e.g. 48,8")
    spk, utt, seed = (parts + ["1"])[:3]
    ts = shlex.split(a.timitseg)
    corpus = Path(str(Path(a.workdir)).rstrip("/") + "-corpus")
    if not corpus.exists():
        say(f"making the synth corpus {corpus} ({spk} speakers x {utt} utterances, seed {seed})")
        subprocess.run(ts + ["synth", "--out", str(corpus), "--speakers", spk, "--utterances-per-speaker", utt,
                             "--seed", seed] + shlex.split(a.synth_args), check=True)
    say(f"preparing {a.workdir}")
    subprocess.run(ts + ["prepare", "--timit", str(corpus), "--out", str(a.workdir)], check=True)


def parse_variant(v: str) -> tuple[str, str]:
    name, sep, args = v.partition("=")
    if not sep or not name.strip():
        raise SystemExit(f"error: --variant {v!r}: expected NAME=ARGS, e.g. "
                         "'semi-drop02=--set crf.max_duration=30 --set model.dropout=0.2'")
    if name.startswith("old-") or "/" in name:
        raise SystemExit(f"error: --variant {name}: names may not start with 'old-' or hold '/'")
    return name.strip(), args


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd


def summarize(results: list[dict], order: list[str]) -> list[dict]:
    rows = []
    for v in order:
        rs = [r for r in results if r["variant"] == v]
        ok = [r for r in rs if r["ok"]]
        bad = [r for r in rs if not r["ok"] and not r.get("pending")]
        row = {"variant": v, "runs": len(rs), "ok": len(ok), "failed": len(bad),
               "pending": sum(1 for r in rs if r.get("pending")),
               "failed_seeds": sorted(r["seed"] for r in bad),
               "errors": sorted({r["error"].splitlines()[0] for r in bad})}
        for key, *_ in METRICS:
            has = [r for r in ok if key in r]  # runs scored before a metric existed lack it ("—" when none has it)
            if has:
                m, sd = mean_std([r[key] for r in has])
                row[key] = {"mean": m, "std": sd, "values": [r[key] for r in sorted(has, key=lambda r: r["seed"])]}
        rows.append(row)
    return rows


SWEEP_RULE = ("on the first sweep split: the bonus with the lowest mean duration KL among those whose mean PER is "
              "within 0.2 points of the lowest mean PER")


def select_bonus(rows: list[dict], split: str):
    """SWEEP_RULE over one variant's rows; None when a bonus has no finished run."""
    if any(r[split] is None or "per" not in r[split] for r in rows):
        return None
    best = min(r[split]["per"]["mean"] for r in rows)
    near = [r for r in rows if r[split]["per"]["mean"] <= best + 0.002]
    return min(near, key=lambda r: (r[split]["duration_kl"]["mean"], abs(r["bonus"])))["bonus"]


def joint_selection(out: Path) -> None:
    """SWEEP_RULE applied to the mean over sizes (every OUT/SIZE/sweep.json, also of earlier invocations) of each
    variant's per-size means: one bonus for a config that serves every size. Writes OUT/sweep-joint.json."""
    sweeps = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/sweep.json"))}
    if len(sweeps) < 2:
        return
    chosen, table = {}, {}
    variants = sorted({r["variant"] for sw in sweeps.values() for r in sw["rows"]})
    for v in variants:
        per_size = [[r for r in sw["rows"] if r["variant"] == v] for sw in sweeps.values()]
        if any(not rows for rows in per_size):
            continue
        split = next(iter(k for k in per_size[0][0] if k not in ("variant", "bonus")))
        bonuses = sorted(set.intersection(*[{r["bonus"] for r in rows} for rows in per_size]))
        rows = []
        for b in bonuses:
            rs = [next(r for r in rows_ if r["bonus"] == b)[split] for rows_ in per_size]
            if any(r is None or "per" not in r for r in rs):
                break
            rows.append({"variant": v, "bonus": b, split: {
                key: {"mean": sum(r[key]["mean"] for r in rs) / len(rs)} for key in ("per", "duration_kl")}})
        else:
            chosen[v] = select_bonus(rows, split)
            table[v] = rows
    write_atomic(out / "sweep-joint.json", json.dumps({"rule": SWEEP_RULE + ", on the mean over sizes",
                                                        "sizes": list(sweeps), "selected": chosen, "rows": table},
                                                       indent=2) + "\n")
    print(f"joint selection over sizes {', '.join(sweeps)} ({SWEEP_RULE}, of the mean over sizes): " +
          ", ".join(f"{v} {b:g}" for v, b in chosen.items()) + f"; {out / 'sweep-joint.json'}")


def sweep_markdown(rows: list[dict], chosen: dict, splits: list[str], size_name: str, a) -> str:
    cols = [("per", "PER %", 100, 2), ("boundary_f1_0", "bF1 tol 0", 100, 1), ("segment_f1", "seg F1", 100, 1),
            ("duration_kl", "dur KL", 1, 4)]
    head = "| | bonus | " + " | ".join(f"{sp} {h}" for sp in splits for _, h, _, _ in cols) + " |"
    lines = [f"crf.phone_bonus sweep, size {size_name}: the last epoch's model of each seed ({a.seeds}) decoded "
             f"with each bonus; mean ± std over seeds. Selected ({SWEEP_RULE}): " +
             ", ".join(f"{v} {b:g}" if b is not None else f"{v} n/a" for v, b in chosen.items()) + ".", "",
             head, "|" + "---|" * (2 + len(splits) * len(cols))]
    for r in rows:
        cells = []
        for sp in splits:
            for key, _, scale, dig in cols:
                x = (r[sp] or {}).get(key)
                if not x:
                    cells.append("—")
                    continue
                m, sd = x["mean"] * scale, x["std"] * scale
                cells.append(f"{m:.{dig}f} ± {sd:.{dig}f}" if math.isfinite(sd) else f"{m:.{dig}f}")
        mark = " (selected)" if chosen.get(r["variant"]) == r["bonus"] else ""
        lines.append(f"| {r['variant']} | {r['bonus']:g}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown(table: list[dict], size_name: str, size: dict, a) -> str:
    head = "| | " + " | ".join(h for _, h, _, _ in METRICS) + " | runs ok / failed |"
    lines = [f"Split {a.split} of {a.workdir}; size {size_name} ({size['layers']} x {size['hidden']} BiLSTM, batch "
             f"{size['batch']}, lr {size['lr']}, crf-reg {size['crf_reg']}, {size['epochs']} epochs); the last "
             f"epoch's model; mean ± std over seeds {a.seeds} (PER in %, F1, P, R and R-value x 100; "
             f"@20ms: one-to-one matches within 20 ms, docs/training.md \"Boundary metrics at 20 ms\").", "",
             head, "|" + "---|" * (len(METRICS) + 2)]
    for row in table:
        cells = []
        for key, _, scale, dig in METRICS:
            if key not in row:
                cells.append("—")
                continue
            m, sd = row[key]["mean"] * scale, row[key]["std"] * scale
            cells.append(f"{m:.{dig}f} ± {sd:.{dig}f}" if math.isfinite(sd) else f"{m:.{dig}f}")
        fail = f"{row['ok']} / {row['failed']}" + (f" ({row['pending']} pending)" if row["pending"] else "")
        if row["failed"]:
            fail += " (seeds " + ",".join(map(str, row["failed_seeds"])) + ": " + "; ".join(row["errors"])[:120] + ")"
        lines.append(f"| {row['variant']} | " + " | ".join(cells) + f" | {fail} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="timitseg variants of --preset main (NAME=ARGS):\n" +
                                 "\n".join(f"  {k}={v}" for k, v in DEFAULT_VARIANTS.items()) +
                                 "\n--preset ablation: " + ", ".join(ABLATION_VARIANTS) +
                                 "\n--preset ablation-matched: " + ", ".join(MATCHED_ABLATION_VARIANTS))
    ap.add_argument("--workdir", required=True, help="prepared WORKDIR (timitseg prepare)")
    ap.add_argument("--torch-semimarkov", type=Path, default=None,
                    help="torch-semimarkov checkout (benchmarking branch); without it only timitseg runs")
    ap.add_argument("--timitseg", default="timitseg", help="command that runs timitseg (default: timitseg)")
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "synth.yaml",
                    help="timitseg base config (default: configs/synth.yaml); the size's keys and the variant's "
                         "--set are applied on top")
    ap.add_argument("--size", default="demo",
                    help="demo, recipe or both (demo,recipe: OUT/demo and OUT/recipe, run side by side). demo: "
                         "2 x 128, batch 8; recipe: 3 x 256, batch 32; both lr 0.005, crf-reg 0.001, 20 epochs, "
                         "dropout 0.3 for the matched variants")
    ap.add_argument("--epochs", type=int, default=0, help="override the size's 20 epochs (smoke tests)")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    ap.add_argument("--variant", action="append", default=None, metavar="NAME=ARGS",
                    help="a timitseg variant: NAME=--set k=v --set ... (repeatable; replaces the defaults; "
                         "{dropout} etc. expand to the size's values)")
    ap.add_argument("--only", default="", help="comma-separated variant names: run just these of the preset")
    ap.add_argument("--extra", default="", help="timitseg arguments appended to every variant, e.g. "
                    "'--set train.rnn_algo=fused' (recorded in the variant, so in results.json)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="main",
                    help="timitseg variants when no --variant is given: main (shipped and matched, linear and "
                         "semi-CRF); ablation (shipped, then one factor at a time set back: crf.lr_scale 1, "
                         "crf.duration_init random, crf.phone_bonus 0, bucketing); ablation-matched (matched, then one factor at a "
                         "time: dropout 0.2, bucketing, per-update cosine, zero CRF init, per-frame loss); all "
                         "(both ablations)")
    ap.add_argument("--split", default="core-test", help="split scored (default core-test)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="timitseg's train.device")
    ap.add_argument("--threads", type=int, default=2, help="train.threads of each timitseg run on the CPU")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                    help="timitseg runs at once (default: cores / 2)")
    ap.add_argument("--old-jobs", type=int, default=1,
                    help="reference runs at once (default 1; they share the GPU, whose small kernels leave room)")
    ap.add_argument("--old-models", default="linear,semicrf", help="reference models (linear, semicrf)")
    ap.add_argument("--old-device", default=None, help="torch device of the reference runs (default: cuda if present)")
    ap.add_argument("--old-no-triton", action="store_true", help="reference runs with use_triton=False (CPU)")
    ap.add_argument("--old-backend", default=None, help="the reference script's backend (default streaming)")
    ap.add_argument("--python", default=sys.executable, help="python with torch for the reference runs")
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per training run before it is failed")
    ap.add_argument("--retry-failed", action="store_true", help="run recorded failures again")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop after this many minutes (0 = no limit): running commands are stopped, unstarted "
                         "runs left pending, the table of what finished is written, exit 4; the same command "
                         "again goes on (timitseg runs resume from their last epoch, reference runs restart)")
    ap.add_argument("--phone-bonus-sweep", default="", metavar="B1,B2,...",
                    help="after the runs, decode each timitseg run's last checkpoint with each crf.phone_bonus "
                         "(evaluate --phone-bonus) on --sweep-splits; writes OUT/SIZE/sweep.md and sweep.json with "
                         "mean ± std per bonus and the bonus selected on the first split (" + SWEEP_RULE + ")")
    ap.add_argument("--sweep-splits", default="",
                    help="comma-separated splits of the sweep, the first one selects (default: dev,SPLIT)")
    ap.add_argument("--out", type=Path, required=True, help="output folder (runs/, results.json, results.md)")
    ap.add_argument("--synth", default=None, metavar="SPEAKERS,UTTERANCES[,SEED]",
                    help="when WORKDIR is not prepared yet, make it first: timitseg synth --speakers SPEAKERS "
                         "--utterances-per-speaker UTTERANCES --seed SEED (default 1) into WORKDIR-corpus, then "
                         "timitseg prepare (the demo corpus: 48,8)")
    ap.add_argument("--synth-args", default="", metavar="ARGS",
                    help="more arguments of that timitseg synth call, e.g. '--voice flite' (the speech corpus)")
    a = ap.parse_args(argv)
    if a.synth and not (Path(a.workdir) / "manifest.json").is_file():
        make_synth(a)
    if not (Path(a.workdir) / "manifest.json").is_file():
        raise SystemExit(f"error: --workdir {a.workdir}: no manifest.json (not a prepared WORKDIR; --synth makes one)")
    a.workdir = str(Path(a.workdir).resolve())
    a.out = a.out.resolve()
    a.config = a.config.resolve()
    if a.torch_semimarkov:
        a.torch_semimarkov = a.torch_semimarkov.resolve()
    for name in a.size.split(","):
        if name not in SIZES:
            raise SystemExit(f"error: --size {a.size}: '{name}' is not one of {', '.join(SIZES)}")
    try:
        a.bonuses = [float(x) for x in a.phone_bonus_sweep.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: --phone-bonus-sweep {a.phone_bonus_sweep}: expected numbers, e.g. 0,0.5,1,2")
    a.sweep_splits = a.sweep_splits or f"dev,{a.split}"
    if a.max_minutes > 0:
        DEADLINE[0] = time.time() + 60 * a.max_minutes

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    return run_all(a)


if __name__ == "__main__":
    sys.exit(main())
