"""The read cost of segment checksums: one multi-MB topic read with and without verification.

Run: ``python -m bench.log_checksum [--records N] [--repeat R]``. Writes a topic of ``N``
records (200 random bytes each) in segments of 20,000 records under a temporary directory, then
reads the whole partition ``R`` times with checksum verification (the default) and ``R`` times
with the checksum files removed and the topic marked as written before checksums (the only way
to read unverified), alternating, and prints the best time of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from trident_assets.log import PartitionedLog, Record


def _read_all(log: PartitionedLog) -> float:
    start = time.perf_counter()
    log.read("bench", 0, 0, log.latest_offset("bench", 0) - 1)
    return time.perf_counter() - start


def main() -> None:
    """Measure and print ``verified``, ``unverified`` and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "log"
        log = PartitionedLog(root)
        log.create_topic("bench", 1)
        rng = random.Random(1)  # incompressible values: multi-MB segments
        for first in range(0, args.records, 20_000):
            n = min(20_000, args.records - first)
            log.append("bench", 0, [Record(rng.randbytes(200)) for _ in range(n)])
        pdir = root / "bench" / "00000"
        size = sum(p.stat().st_size for p in pdir.glob("*.parquet"))
        sidecars = {p: p.read_bytes() for p in pdir.glob("*.crc32")}
        meta_path = root / "bench" / "topic.json"
        meta = json.loads(meta_path.read_text())
        legacy = {k: v for k, v in meta.items() if k != "checksum"}
        verified: list[float] = []
        unverified: list[float] = []
        for _ in range(args.repeat):
            for p, data in sidecars.items():
                p.write_bytes(data)
            meta_path.write_text(json.dumps(meta))
            verified.append(_read_all(log))
            for p in sidecars:
                p.unlink()
            meta_path.write_text(json.dumps(legacy))
            unverified.append(_read_all(log))
        best_v, best_u = min(verified), min(unverified)
        print(f"records {args.records}, segment bytes {size / 1e6:.1f} MB, {len(sidecars)} files")
        print(f"verified   best {best_v * 1000:.1f} ms")
        print(f"unverified best {best_u * 1000:.1f} ms")
        print(f"ratio verified/unverified {best_v / best_u:.3f}")


if __name__ == "__main__":
    main()
