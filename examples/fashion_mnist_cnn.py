"""The bundled example: a small CNN for Fashion-MNIST (28x28 grey images,
10 classes), exported to ONNX the way gpipe expects models (opset 17,
training mode so that Dropout and BatchNorm keep their training behaviour,
no constant folding so that parameters keep their names).

usage: fashion_mnist_cnn.py --output model.onnx [--batch-size N] [--seed S]
"""
import argparse

import torch
import torch.nn as nn


class FashionMnistCnn(nn.Module):
    """Two convolution blocks and two linear layers: the classic small CNN
    (gpipe trains BatchNorm and Dropout too; docs/training.md)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
            nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = FashionMnistCnn().train()
    x = torch.randn(args.batch_size, 1, 28, 28)
    torch.onnx.export(model, x, args.output, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["image"],
                      output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
