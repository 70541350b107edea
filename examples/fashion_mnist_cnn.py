"""The bundled example: a small CNN for Fashion-MNIST (28x28 grey images,
10 classes), exported to ONNX the way gpipe expects models (opset 17,
training mode so that Dropout and BatchNorm keep their training behaviour,
no constant folding so that parameters keep their names).

usage: fashion_mnist_cnn.py --output model.onnx [--batch-size N] [--seed S]
"""
import argparse

import torch
import torch.nn as nn


def conv_bn_relu(channels_in, channels_out):
    return [nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels_out), nn.ReLU()]


class FashionMnistCnn(nn.Module):
    """A VGG-style CNN: two blocks of two 3x3 convolutions with BatchNorm,
    each block ending in a 2x2 max pooling, then Dropout and two linear
    layers. The second block has twice the channels on a quarter of the
    pixels, so the two blocks cost about the same: cut between them, two
    cores get stages of equal work (scripts/demo.sh)."""

    def __init__(self, width=16):
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn_relu(1, width), *conv_bn_relu(width, width),
            nn.MaxPool2d(2),
            *conv_bn_relu(width, 2 * width),
            *conv_bn_relu(2 * width, 2 * width), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(0.25), nn.Linear(2 * width * 7 * 7, 128),
            nn.ReLU(), nn.Linear(128, 10))

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
