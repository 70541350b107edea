"""PyTorch on the main job's model, the best alternative a user has on the
same cores: examples/fashion_mnist_cnn.py, batch 64, SGD with momentum,
two intra-op threads and OpenBLAS single-threaded (its best on two cores
here). Times STEPS training steps after 10 of warm-up, prints the median
step and writes {"median_s", "mean_s", "samples_per_s"} (of the median)
to JSON when given. Used by scripts/demo.sh and
bench/run_stability_benchmark.py.

usage: demo_torch_steps.py STEPS [JSON]
"""
import json
import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read when torch loads OpenBLAS
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "examples"))
from fashion_mnist_cnn import FashionMnistCnn  # noqa: E402

BATCH = 64

steps = int(sys.argv[1])
torch.set_num_threads(2)
torch.manual_seed(0)
model = FashionMnistCnn().train()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))
times = []
for step in range(10 + steps):
    start = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - start)
times = times[10:]
median = sorted(times)[len(times) // 2]
print(f"PyTorch: {median * 1e3:.2f} ms a step (median)")
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        json.dump({"median_s": median, "mean_s": sum(times) / len(times),
                   "samples_per_s": BATCH / median}, f)
