#!/usr/bin/env python3
"""The map of the layers (docs/design.md) kept: every #include "FOLDER/..." of
the product's sources points down or within its own folder.

  scripts/check_layers.py [--root DIR]

  app      -> train, eval, options, model, config, crf, data, common, settings
  capi     -> eval, options, model, config, crf, data, common, settings   (libtimitseg.so, the C API of
                                                                          include/timitseg.h; beside app)
    capi/crf_* -> crf, common, settings                                  (its CRF half)
  train    -> eval, options, model, config, crf, data, common, settings   (each epoch's dev evaluation)
  eval     -> options, model, config, crf, data, common, settings
  options  -> model, config, crf, data, common, settings   (the config in model/'s types, the `auto` picks)
  model    -> config, crf, data, common, settings
  config   -> crf, data, common, settings      (the training configuration, its enums and fault spec)
  crf      -> common, settings
  data     -> common, settings
  common   -> settings
  settings -> (nothing of the project: the environment's table and parser, the numeric ranges)

The implementations of the model's interfaces are private to model/: no
folder but model/ includes "model/cpu/..." or "model/cuda/..." (options/,
eval/, train/ and app/ reach them only through model/executor.h,
model/encoder.h, model/fused_lstm.h).

The C API's CRF half (capi/crf_*: the CRF handles over crf::Session) stands on
crf/ alone: its files include only crf/, the bottom rooms common/ and
settings/ and, of capi/, the CRF half and the helpers both halves share
(capi/api_detail.h); never model/, eval/, data/ or the model half
(capi/model_api.cpp).

Prints every include that runs another way (FILE:LINE: FOLDER may not include
OTHER/...) and exits 1 when there is any, 0 otherwise. Only quoted includes
whose first path part is one of these folders count (system and library
headers use <...>).
"""
import os
import re
import sys

import checklib

MAY_INCLUDE = {
    "settings": set(),
    "common": {"settings"},
    "crf": {"common", "settings"},
    "data": {"common", "settings"},
    "config": {"crf", "data", "common", "settings"},
    "model": {"config", "crf", "data", "common", "settings"},
    "options": {"model", "config", "crf", "data", "common", "settings"},
    "eval": {"options", "model", "config", "crf", "data", "common", "settings"},
    "train": {"eval", "options", "model", "config", "crf", "data", "common", "settings"},
    "app": {"train", "eval", "options", "model", "config", "crf", "data", "common", "settings"},
    "capi": {"eval", "options", "model", "config", "crf", "data", "common", "settings"},
}
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([^"/]+)/[^"]*)"')
# Sub-folders private to their folder: "FOLDER/SUB/..." from any other folder is refused.
PRIVATE = {"model": ("cpu", "cuda")}
# Files of a folder held to fewer folders than the folder itself: (folder, file-name prefix) -> the
# folders they may include, and the files of their own folder they may include (by prefix or name).
HALVES = {("capi", "crf_"): ({"crf", "common", "settings"}, ("crf_", "api_detail.h"))}


def half_of(folder, path):
    name = os.path.basename(path)
    for (f, prefix), rule in HALVES.items():
        if f == folder and name.startswith(prefix):
            return prefix, rule
    return None, None


def violations(root):
    out = []
    for folder, path in checklib.source_files(root, MAY_INCLUDE, EXTENSIONS):
        allowed = MAY_INCLUDE[folder]
        prefix, half = half_of(folder, path)
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(2)
                where = f"{os.path.relpath(path, root)}:{n}"
                if target in MAY_INCLUDE and target != folder and target not in allowed:
                    out.append(f"{where}: {folder}/ may not include {target}/ "
                               f"({line.strip()}); allowed: {', '.join(sorted(allowed)) or 'nothing'}")
                parts = m.group(1).split("/")
                if half and target in MAY_INCLUDE:
                    folders, own = half
                    if target == folder and not parts[-1].startswith(own):
                        out.append(f"{where}: {folder}/{prefix}* may not include {m.group(1)} "
                                   f"({line.strip()}); of {folder}/ only {', '.join(own)}")
                    elif target != folder and target in allowed and target not in folders:
                        out.append(f"{where}: {folder}/{prefix}* may not include {target}/ "
                                   f"({line.strip()}); allowed: {', '.join(sorted(folders))}, {folder}/{prefix}*")
                if target != folder and len(parts) > 2 and parts[1] in PRIVATE.get(target, ()):
                    out.append(f"{where}: {folder}/ may not include {target}/{parts[1]}/ "
                               f"({line.strip()}); it is private to {target}/ (use its interfaces)")
    return out


def main():
    a = checklib.arguments(__doc__).parse_args()
    bad = violations(a.root)
    return checklib.report(bad, f"check_layers: {len(bad)} include(s) against the map of the layers (docs/design.md)",
                           "check_layers: every include points down (app -> train -> eval -> options -> model -> config -> crf, data -> common -> settings)")


if __name__ == "__main__":
    sys.exit(main())
