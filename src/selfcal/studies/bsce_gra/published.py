"""[GRA] published numbers (Lin et al., "Uncertainty Weighted Gradients for Model Calibration"),
transcribed from the paper's Tables 1-5 (methods §7.3). Percent; each cell ``pre/post``
temperature scaling (accuracy: one number); mean over 3 seeds. Printed beside our runs, never
compared as if they were the same experiment (different data and networks).
"""

from __future__ import annotations

LOSSES = ("ce", "brier", "mmce", "flsd53", "dfl", "bsce", "bsce-gra")

_ECE = """
cifar10 resnet50 4.36/1.32 4.29/1.50 4.48/1.41 1.26/1.15 1.00/1.00 0.88/0.88 0.74/0.74
cifar10 resnet110 4.7/1.56 4.48/1.66 4.80/1.29 1.81/1.17 1.01/1.01 0.99/0.99 0.87/0.87
cifar10 wide_resnet26_10 3.35/0.94 2.86/1.10 3.65/1.28 1.84/1.04 3.32/1.16 1.7/0.95 1.46/1.12
cifar10 densenet121 4.64/1.46 3.96/1.46 4.81/1.67 1.37/1.17 0.87/0.77 1.01/1.01 0.87/0.87
cifar100 resnet50 18.05/3.05 7.87/4.27 15.87/3.32 5.53/2.57 2.54/2.56 1.90/1.90 1.59/1.59
cifar100 resnet110 18.84/4.63 16.77/4.30 18.65/3.93 6.88/3.71 3.47/3.47 2.75/2.75 2.53/2.53
cifar100 wide_resnet26_10 14.81/3.27 7.74/4.46 14.58/2.99 2.70/2.71 5.45/2.52 2.63/2.42 2.46/2.46
cifar100 densenet121 19.1/3.43 8.13/2.99 17.56/2.87 3.38/1.30 4.68/1.83 1.63/1.62 1.62/1.61
"""

_ACCURACY = """
cifar10 resnet50 95.08 94.34 95.04 95.04 94.63 95.03 94.69
cifar10 resnet110 94.84 94.41 94.91 94.76 94.79 94.88 94.72
cifar10 wide_resnet26_10 96.03 95.88 95.74 95.75 95.82 95.78 95.77
cifar10 densenet121 94.95 94.35 94.73 94.92 94.58 94.76 94.84
cifar100 resnet50 77.22 72.47 77.49 77.69 76.70 77.12 76.84
cifar100 resnet110 77.44 74.42 77.42 77.77 77.27 77.30 77.16
cifar100 wide_resnet26_10 79.51 78.72 79.14 80.44 80.35 79.96 80.28
cifar100 densenet121 76.76 73.32 76.07 77.29 77.02 76.82 76.96
"""


def _parse(table: str) -> dict[tuple[str, str, str], str]:
    out = {}
    for line in table.strip().splitlines():
        dataset, model, *cells = line.split()
        for loss, cell in zip(LOSSES, cells, strict=True):
            out[(dataset, model, loss)] = cell
    return out


ECE = _parse(_ECE)
"""``(dataset, model, loss) -> "pre/post"`` ECE % (15 bins), [GRA] Table 1."""
ACCURACY = _parse(_ACCURACY)
"""``(dataset, model, loss) -> accuracy %``, [GRA] Table 3."""
TABLE2 = {
    "flsd53": ("1.26/1.15", "95.04"),
    "flsd53-gra": ("0.88/0.88", "94.72"),
    "dfl": ("1.00/1.00", "94.63"),
    "dfl-gra": ("0.93/0.84", "94.76"),
    "bsce": ("0.88/0.88", "95.03"),
    "bsce-gra": ("0.74/0.74", "94.69"),
}
"""[GRA] Table 2 (CIFAR-10, ResNet-50): loss -> (ECE % pre/post, accuracy %)."""
