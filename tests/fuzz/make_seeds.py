#!/usr/bin/env python3
"""Rebuilds the seed corpora of tests/fuzz/corpus/ (docs/fuzzing.md) from a synth
corpus and its prepared WORKDIR (Python 3 standard library only):

  timitseg synth --out SYNTH --speakers 4 --utterances-per-speaker 1
  timitseg prepare --timit SYNTH --out WORK
  tests/fuzz/make_seeds.py SYNTH WORK

Audio seeds are cut to 800 samples (and their headers fixed), split files to
20 frames, so each target's seeds stay well under 50 KB."""
import json
import pathlib
import shutil
import struct
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def st_read(path):
    b = path.read_bytes()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop('__metadata__', {})
    data = b[8 + n:]
    tensors = {k: (v['dtype'], v['shape'], data[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in header.items()}
    return meta, tensors


def st_write(path, meta, tensors):
    header, blobs, off = {'__metadata__': meta}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    path.write_bytes(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def small_split(src, frames):
    """The first utterance of a prepared split file, cut to `frames` frames."""
    meta, t = st_read(src)
    dim = t['features'][1][1]
    feats = t['features'][2][:frames * dim * 4]
    labels = list(struct.unpack('<%di' % frames, t['labels'][2][:frames * 4]))
    segs = []
    for i, l in enumerate(labels):
        if segs and segs[-1][2] == l:
            segs[-1][1] += 1
        else:
            segs.append([i, 1, l])
    utts = json.loads(meta['utterances'])[:1]
    utts[0]['audio'] = '/corpus/' + utts[0]['id'].upper() + '.WAV'
    meta = dict(meta, utterances=json.dumps(utts, separators=(',', ':')))
    flat = [x for s in segs for x in s]
    return meta, {
        'features': ('F32', [frames, dim], feats),
        'labels': ('I32', [frames], struct.pack('<%di' % frames, *labels)),
        'num_samples': ('I64', [1], struct.pack('<q', 400 + 160 * (frames - 1))),
        'segments': ('I32', [len(segs), 3], struct.pack('<%di' % len(flat), *flat)),
        'utt_frame_offsets': ('I64', [2], struct.pack('<2q', 0, frames)),
        'utt_segment_offsets': ('I64', [2], struct.pack('<2q', 0, len(segs))),
    }


def sphere(src, n, byte_format=None):
    b = src.read_bytes()
    head = b[:1024].split(b'end_head')[0].decode()
    lines = [l for l in head.splitlines() if not l.startswith('sample_count')]
    if byte_format:
        lines = [l if not l.startswith('sample_byte_format') else 'sample_byte_format -s2 ' + byte_format for l in lines]
    text = '\n'.join(lines + ['sample_count -i %d' % n, 'end_head', '']).encode()
    pcm = b[1024:1024 + 2 * n]
    if byte_format == '10':
        pcm = b''.join(pcm[i + 1:i + 2] + pcm[i:i + 1] for i in range(0, len(pcm), 2))
    return text + b' ' * (1024 - len(text)) + pcm


def riff(pcm, rate=16000, channels=1, bits=16):
    fmt = struct.pack('<HHIIHH', 1, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    body = b'WAVE' + b'fmt ' + struct.pack('<I', len(fmt)) + fmt + b'data' + struct.pack('<I', len(pcm)) + pcm
    return b'RIFF' + struct.pack('<I', len(body)) + body


def main():
    synth, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out = HERE / 'corpus'
    wavs = sorted(synth.rglob('SI*.WAV'))
    phns = sorted(synth.rglob('SI*.PHN'))
    d = out / 'phn'
    d.mkdir(parents=True, exist_ok=True)
    for p in phns[:2]:
        shutil.copy(p, d / (p.parent.name.lower() + '_' + p.name.lower()))
    # a gap, a q merged into the phone before it, a trailing h#
    (d / 'gap_q.phn').write_text('0 2400 h#\n2400 3000 q\n3000 4200 aa\n4600 5000 b\n5000 7000 h#\n')
    d = out / 'audio'
    d.mkdir(parents=True, exist_ok=True)
    (d / 'sphere_le.wav').write_bytes(sphere(wavs[0], 800))
    (d / 'sphere_be.wav').write_bytes(sphere(wavs[0], 800, '10'))
    pcm = wavs[0].read_bytes()[1024:1024 + 1600]
    (d / 'riff16.wav').write_bytes(riff(pcm))
    (d / 'riff_stereo8k.wav').write_bytes(riff(pcm, rate=8000, channels=2))
    for name in ('safetensors', 'cache'):
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        st_write(d / 'train20.safetensors', *small_split(work / 'train.safetensors', 20))
        shutil.copy(work / 'cmvn.safetensors', d / 'cmvn.safetensors')
    d = out / 'config'
    d.mkdir(parents=True, exist_ok=True)
    for p in (ROOT / 'configs').glob('*.yaml'):
        shutil.copy(p, d / p.name)
    shutil.copy(ROOT / 'tests/model/fixtures/legacy/tiny.yaml', d / 'tiny.yaml')
    d = out / 'manifest'
    d.mkdir(parents=True, exist_ok=True)
    m = json.loads((work / 'manifest.json').read_text())
    (d / 'prepared.json').write_text(json.dumps(m, indent=2))
    m['files'] = {'train.safetensors': {'bytes': '@TRAIN_BYTES@', 'sha256': '@TRAIN_SHA256@'},
                  'cmvn.safetensors': {'bytes': '@CMVN_BYTES@', 'sha256': '@CMVN_SHA256@'}}
    text = json.dumps(m, indent=2).replace('"@TRAIN_BYTES@"', '@TRAIN_BYTES@').replace('"@CMVN_BYTES@"', '@CMVN_BYTES@')
    (d / 'fixture.json').write_text(text)


if __name__ == '__main__':
    main()
