"""Prints every scalar of a TensorBoard log directory as 'tag step value', read with
TensorBoard's own reader (the event_accumulator TensorBoard's UI uses). Exit 3 when the
tensorboard package is missing, so the caller can skip with that reason."""
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:  # the test skips, naming what is missing
    print(f"tensorboard is not installed: {e}", file=sys.stderr)
    sys.exit(3)

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})  # 0: keep every point
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for ev in acc.Scalars(tag):
        print(f"{tag} {ev.step} {ev.value:.6g}")
