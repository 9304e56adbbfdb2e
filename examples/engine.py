#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""engine.py - a minimal PyTorch inference-engine client of weightd. Copy it as a starting point.

    engine.py [--socket PATH] [--dtype DTYPE] [--shard AXIS:RANK:WORLD] [--hold SECONDS] CHECKPOINT

Binds every tensor of CHECKPOINT as one unit (all or nothing) into torch tensors that are
weightd's read-only shared memory, prints for each where its memory lives (device:inode of the
shared-memory object, so two runs can be compared) and a checksum of its bytes, says how many
checkpoint bytes the daemon had to read (0 when another process loaded it first), holds the
tensors for SECONDS, then lets them go.

With a model: ``weightd.torch.assign(model, tensors)`` puts them in place of its parameters and
buffers without copying; run it under ``torch.inference_mode()``. Never write to them in place
(the process would die with SIGSEGV; nothing shared changes): ``t.clone()`` for a private copy.
"""

import argparse
import sys
import time
import zlib

import torch

import weightd


def mapping_of(address: int) -> str:
    """device:inode of the mapping holding `address` in this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return f"{parts[3]}:{parts[4]}"
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description="Bind a checkpoint served by weightd into torch.")
    ap.add_argument("checkpoint")
    ap.add_argument("--socket", help="weightd's socket (default: $WEIGHTD_SOCKET or "
                    f"{weightd.DEFAULT_SOCKET})")
    ap.add_argument("--dtype", help="cast every tensor to this weightd dtype (e.g. BF16)")
    ap.add_argument("--shard", help="AXIS:RANK:WORLD, this rank's part of every tensor")
    ap.add_argument("--hold", type=float, default=0.0, help="seconds to hold the tensors")
    args = ap.parse_args()
    shard = None
    if args.shard:
        axis, rank, world = (int(x) for x in args.shard.split(":"))
        shard = (axis, rank, world)

    try:
        with weightd.connect(args.socket, "engine.py") as client:
            tensors = client.load(args.checkpoint, dtype=args.dtype, shard=shard)
            for name, t in tensors.items():
                where = mapping_of(t.data_ptr()) if t.numel() else "-"
                crc = zlib.crc32(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
                print(f"{name}: {str(t.dtype).replace('torch.', '')}{list(t.shape)} "
                      f"at {where} crc32 {crc:08x}")
            print(f"{len(tensors)} tensors, {sum(t.nbytes for t in tensors.weights.values())} "
                  f"bytes; the daemon read {tensors.bytes_read} checkpoint bytes")
            time.sleep(args.hold)
            tensors.release()
    except weightd.Error as e:
        print(f"engine.py: {e} ({e.code})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
