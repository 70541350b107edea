"""The four reference models of the end-to-end tests, built with PyTorch.

Each builder returns (module, example input, op expectations), where the
expectations map an nn op name to the number of PyTorch modules it must come
from.
"""
import sys
import traceback
import warnings

import torch
import torch.nn as nn
import torchvision

# torch.onnx's note on every BatchNorm in training mode (its
# num_batches_tracked counter is not exported); it buries the tests' own
# output in logs.
warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation")


def mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                      nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return m, torch.randn(8, 1, 28, 28)


def mlp_dropout():
    """The MLP with dropout between its layers (random in training)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                      nn.Dropout(0.2), nn.Linear(256, 128), nn.ReLU(),
                      nn.Dropout(0.2), nn.Linear(128, 10))
    return m, torch.randn(8, 1, 28, 28)


def mlp_activations():
    """The activations MobileNets and GANs use: LeakyReLU, ReLU6 (exported
    as Clip), Hardswish and Hardsigmoid."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.LeakyReLU(0.1),
                      nn.Linear(128, 64), nn.ReLU6(), nn.Linear(64, 64),
                      nn.Hardswish(), nn.Linear(64, 32), nn.Hardsigmoid(),
                      nn.Linear(32, 10))
    return m, torch.randn(8, 1, 28, 28)


def cnn():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))
    return m, torch.randn(8, 1, 28, 28)


def cnn_avgpool():
    """Average pooling and a global average pool instead of max pooling."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(16, 10))
    return m, torch.randn(8, 1, 28, 28)


def cnn_bn():
    """Convolutions with BatchNorm (trained with batch statistics)."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    return m, torch.randn(8, 1, 28, 28)


def cnn_upsample():
    """A decoder's nearest upsampling (nn.Upsample, exported as Resize)
    between convolutions: its gradient sums each 2x2 block of copies."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Conv2d(8, 4, 3, padding=1), nn.ReLU(), nn.AvgPool2d(4),
        nn.Flatten(), nn.Linear(4 * 7 * 7, 10))
    return m, torch.randn(8, 1, 28, 28)


def cnn_bilinear():
    """A segmentation head's bilinear upsampling (align_corners False, as
    torchvision's LR-ASPP and U-Nets use it; exported as Resize linear):
    trained through constant interpolation matrices."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
        nn.Conv2d(8, 4, 3, padding=1), nn.ReLU(), nn.AvgPool2d(4),
        nn.Flatten(), nn.Linear(4 * 7 * 7, 10))
    return m, torch.randn(8, 1, 28, 28)


class SmallUNet(nn.Module):
    """A small U-Net: a strided encoder, a ConvTranspose decoder (stride 2,
    output padding, grouped) with a skip connection concatenated, a second
    ConvTranspose and a nearest Upsample back to the input's size; the map
    pooled into 10 class logits."""

    def __init__(self, channels=1, size=28):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1),
                                  nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1),
                                  nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1,
                                     output_padding=1, groups=2)
        self.dec = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(),
                                 nn.ConvTranspose2d(8, 4, 2, stride=2),
                                 nn.Upsample(scale_factor=0.5))
        self.head = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(),
                                  nn.Linear(4 * (size // 4) ** 2, 10))

    def forward(self, x):
        a = self.enc1(x)
        b = self.up(self.enc2(a))
        return self.head(self.dec(torch.cat([a, b], 1)))


def unet_transpose():
    torch.manual_seed(0)
    return SmallUNet(), torch.randn(8, 1, 28, 28)


def resnet18():
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=10)
    return m, torch.randn(4, 3, 32, 32)


class TransformerClassifier(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=2, classes=10, dropout=0.1):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=128,
                                           dropout=dropout, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def transformer():
    torch.manual_seed(0)
    return TransformerClassifier(), torch.randn(4, 16, 64)


def transformer_no_dropout():
    """The Transformer with dropout ratio 0: deterministic, so its training
    can be compared step by step with PyTorch's."""
    torch.manual_seed(0)
    return TransformerClassifier(dropout=0.0), torch.randn(4, 16, 64)


MODELS = {"mlp": mlp, "cnn": cnn, "cnn_avgpool": cnn_avgpool, "cnn_bn": cnn_bn,
          "resnet18": resnet18, "transformer": transformer}
# Variants for the training tests (not in the import and inference suites).
VARIANTS = {"mlp_dropout": mlp_dropout, "mlp_activations": mlp_activations,
            "transformer_no_dropout": transformer_no_dropout,
            "cnn_upsample": cnn_upsample, "cnn_bilinear": cnn_bilinear,
            "unet_transpose": unet_transpose}


def export(name, path, batch=None):
    """Exports in training mode. `batch` sets the example's batch size, which
    some exports (the Transformer's attention reshapes) fix in the graph."""
    model, x = {**MODELS, **VARIANTS}[name]()
    if batch is not None:
        x = torch.randn(batch, *x.shape[1:])
    model.train()
    torch.onnx.export(model, x, path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["logits"])
    return model, x


def run_checks(cases, check):
    """Runs check(case) -> [error, ...] for each (label, case); prints each
    failure and a summary; returns the process exit status."""
    failed = []
    for label, case in cases:
        try:
            errors = check(case)
        except Exception as e:  # noqa: BLE001 (reported, and the next runs)
            # A case that raises (a full disk, a file gpipe-run did not
            # write) fails alone, named, and the summary is still printed.
            traceback.print_exc(file=sys.stdout)
            errors = [f"{type(e).__name__}: {e}"]
        for e in errors:
            print(f"FAIL {label}: {e}", flush=True)
        failed += [f"FAIL {label}: {e}" for e in errors[:1]]
    # Again just above the summary, where FileCheck's report of a missed
    # summary line shows its context.
    for line in failed:
        print(line)
    print(f"{len(cases) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
